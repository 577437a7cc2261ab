"""Fault campaigns against a real Kafka broker: ``python -m chaos`` (``bin/chaos``).

A campaign runs the consumers of one mode (``alo``, ``amo``, ``share`` or ``key-shared``) as
separate OS processes against its own development broker, injects faults chosen by a seeded
random generator while records flow (kill -9 of a consumer, SIGSTOP of a consumer for longer
than two heartbeat intervals, kill -9 of the broker and a restart on the same data), and then
checks the run offline from what every process journalled and from the run's coordination log.

Modules:

* :mod:`chaos.journal` -- the append-only journals every process writes (one JSON object per
  line, written to the OS before the record is committed or acknowledged) and their reader;
* :mod:`chaos.worker` -- a consumer process (the public ``Marshaler`` API) that journals every
  hand-out and every completion;
* :mod:`chaos.producer` -- the producer process, which journals every acknowledged record;
* :mod:`chaos.logview` -- what the run's coordination log says: ownership stints of partitions
  and key slots, share-record acquisitions and acknowledgements (pure);
* :mod:`chaos.checker` -- the offline checker of one run (pure; the rules are in its
  docstring);
* :mod:`chaos.run_data` -- what a run left behind and the checker's verdict (plain data);
* :mod:`chaos.settings` -- a campaign's options, a run's outcome and the names they share;
* :mod:`chaos.run` -- one run: its consumer processes, its faults, its completion and check;
* :mod:`chaos.follower` -- the runner's replay of a run's coordination log;
* :mod:`chaos.topics` -- a run's data topics read to their end (read_committed);
* :mod:`chaos.campaign` -- the campaign (every run of every mode) and its report lines;
* :mod:`chaos.runner` -- the command line (the steps of a campaign in its docstring).
"""
