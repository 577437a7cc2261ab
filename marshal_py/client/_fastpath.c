/* marshal_py.client._fastpath: the per-record work of a consumer, in C.
 *
 * Three parts, each with a Python build of the same behaviour that is used when this
 * extension was not built (tests/unit/test_fastpath.py and test_share_handout.py run both on
 * the same inputs):
 *
 * 1. ConfluentRecord and split(): the librdkafka fetcher's records (Python build:
 *    marshal_py/client/confluent_fetcher.py).
 * 2. CursorCore and Committer: at-least-once commit(record) in order, the one call an
 *    application makes per record (Python build: marshal_py/client/fastpath.py). Everything but the in-order case goes to the Python
 *    code, which keeps the rules; the C code only does what that code's fast path does.
 * 3. share_batch(): a share member's fetched records into the ShareRecords it hands out
 *    (Python build: marshal_py/client/share_handout.py).
 *
 * Part 1.
 * A ConfluentRecord holds what a fetch made of one librdkafka message: its topic, partition
 * and offset (read once, when the record is made) and the confluent_kafka.Message itself;
 * key, value, headers and timestamps are read from the message when asked for. It has the
 * attributes of kafka-python's ConsumerRecord, so code reads records of either fetcher alike.
 *
 * Why C: the fetcher hands out a million or more records a second, and each record built by
 * Python code costs about four times what librdkafka's consume() spends on it (see
 * marshal_py/client/fetchers.py). split() builds the records of a whole consume() result in
 * one call.
 * Records are not tracked by the cyclic garbage collector: they refer only to a str, two
 * ints and a Message, none of which can refer back to a record, so no cycle can pass
 * through one.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *topic;
    PyObject *partition;
    PyObject *offset;
    PyObject *message;
} Record;

static PyObject *s_key, *s_value, *s_headers, *s_timestamp, *s_offset, *s_error;
static PyObject *s_topic, *s_partition;

static void
Record_dealloc(Record *self)
{
    Py_XDECREF(self->topic);
    Py_XDECREF(self->partition);
    Py_XDECREF(self->offset);
    Py_XDECREF(self->message);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
make_record(PyTypeObject *type, PyObject *topic, PyObject *partition, PyObject *offset,
            PyObject *message)
{
    Record *self = (Record *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(topic);
    self->topic = topic;
    Py_INCREF(partition);
    self->partition = partition;
    Py_INCREF(offset);
    self->offset = offset;
    Py_INCREF(message);
    self->message = message;
    return (PyObject *)self;
}

static PyObject *
Record_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *topic, *partition, *offset, *message;
    static char *kwlist[] = {"topic", "partition", "offset", "message", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UO!O!O:ConfluentRecord", kwlist, &topic,
                                     &PyLong_Type, &partition, &PyLong_Type, &offset,
                                     &message)) {
        return NULL;
    }
    return make_record(type, topic, partition, offset, message);
}

static PyObject *
call_message(Record *self, PyObject *name)
{
    return PyObject_CallMethodNoArgs(self->message, name);
}

static PyObject *
Record_key(Record *self, void *closure)
{
    return call_message(self, s_key);
}

static PyObject *
Record_value(Record *self, void *closure)
{
    return call_message(self, s_value);
}

static PyObject *
Record_headers(Record *self, void *closure)
{
    PyObject *headers = call_message(self, s_headers);
    if (headers == Py_None) {
        Py_DECREF(headers);
        return PyList_New(0);
    }
    return headers;
}

/* The message's (type, ms) pair, type 0 meaning "no timestamp"; -1 on error. */
static int
timestamp_of(Record *self, long *kind, PyObject **ms)
{
    PyObject *pair = call_message(self, s_timestamp);
    if (pair == NULL) {
        return -1;
    }
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        Py_DECREF(pair);
        PyErr_SetString(PyExc_TypeError, "Message.timestamp() is not a (type, ms) pair");
        return -1;
    }
    *kind = PyLong_AsLong(PyTuple_GET_ITEM(pair, 0));
    if (*kind == -1 && PyErr_Occurred()) {
        Py_DECREF(pair);
        return -1;
    }
    *ms = Py_NewRef(PyTuple_GET_ITEM(pair, 1));
    Py_DECREF(pair);
    return 0;
}

static PyObject *
Record_timestamp(Record *self, void *closure)
{
    long kind;
    PyObject *ms;
    if (timestamp_of(self, &kind, &ms) < 0) {
        return NULL;
    }
    if (kind == 0) {
        Py_DECREF(ms);
        Py_RETURN_NONE;
    }
    return ms;
}

static PyObject *
Record_timestamp_type(Record *self, void *closure)
{
    long kind;
    PyObject *ms;
    if (timestamp_of(self, &kind, &ms) < 0) {
        return NULL;
    }
    Py_DECREF(ms);
    /* librdkafka: 0 not available, 1 CreateTime, 2 LogAppendTime; Kafka's: 0 and 1. */
    if (kind == 0) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLong(kind - 1);
}

static PyObject *
size_of(PyObject *raw)
{
    Py_ssize_t n;
    if (raw == NULL) {
        return NULL;
    }
    n = raw == Py_None ? -1 : PyObject_Length(raw);
    Py_DECREF(raw);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    return PyLong_FromSsize_t(n);
}

static PyObject *
Record_key_size(Record *self, void *closure)
{
    return size_of(call_message(self, s_key));
}

static PyObject *
Record_value_size(Record *self, void *closure)
{
    return size_of(call_message(self, s_value));
}

static PyObject *
Record_repr(Record *self)
{
    return PyUnicode_FromFormat("ConfluentRecord(topic=%R, partition=%S, offset=%S)",
                                self->topic, self->partition, self->offset);
}

static PyMemberDef Record_members[] = {
    {"topic", T_OBJECT_EX, offsetof(Record, topic), READONLY, "The record's topic."},
    {"partition", T_OBJECT_EX, offsetof(Record, partition), READONLY,
     "The record's partition."},
    {"offset", T_OBJECT_EX, offsetof(Record, offset), READONLY, "The record's offset."},
    {"message", T_OBJECT_EX, offsetof(Record, message), READONLY,
     "The confluent_kafka.Message the record was read from."},
    {NULL},
};

static PyGetSetDef Record_getset[] = {
    {"key", (getter)Record_key, NULL, "The record's key (bytes or None).", NULL},
    {"value", (getter)Record_value, NULL, "The record's value (bytes or None).", NULL},
    {"headers", (getter)Record_headers, NULL, "The record's headers: (str, bytes) pairs.",
     NULL},
    {"timestamp", (getter)Record_timestamp, NULL, "The timestamp in ms (None: none).", NULL},
    {"timestamp_type", (getter)Record_timestamp_type, NULL,
     "0: CreateTime, 1: LogAppendTime (None: no timestamp).", NULL},
    {"serialized_key_size", (getter)Record_key_size, NULL,
     "The key's length in bytes (-1: no key).", NULL},
    {"serialized_value_size", (getter)Record_value_size, NULL,
     "The value's length in bytes (-1: no value).", NULL},
    {NULL},
};

static PyTypeObject RecordType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "marshal_py.client._fastpath.ConfluentRecord",
    .tp_doc = PyDoc_STR(
        "ConfluentRecord(topic, partition, offset, message): a record of the confluent "
        "fetcher, with the attributes of kafka-python's ConsumerRecord."),
    .tp_basicsize = sizeof(Record),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Record_new,
    .tp_dealloc = (destructor)Record_dealloc,
    .tp_repr = (reprfunc)Record_repr,
    .tp_members = Record_members,
    .tp_getset = Record_getset,
};

/* A no-argument method of the messages' type, resolved once per split() call: its C
 * function when it is a plain METH_NOARGS method of a C type (called directly, after checking
 * each message's type), else the generic call by name. */
typedef struct {
    PyTypeObject *type;
    PyObject *name;
    PyCFunction direct;
} Method;

static void
resolve(Method *method, PyTypeObject *type, PyObject *name)
{
    PyObject *descr = PyObject_GetAttr((PyObject *)type, name);
    method->type = type;
    method->name = name;
    method->direct = NULL;
    if (descr == NULL) {
        PyErr_Clear();
        return;
    }
    if (Py_IS_TYPE(descr, &PyMethodDescr_Type)) {
        PyMethodDef *def = ((PyMethodDescrObject *)descr)->d_method;
        int kind = def->ml_flags & (METH_VARARGS | METH_KEYWORDS | METH_NOARGS | METH_O
                                    | METH_FASTCALL | METH_METHOD);
        if (kind == METH_NOARGS && ((PyMethodDescrObject *)descr)->d_common.d_type == type) {
            method->direct = def->ml_meth;
        }
    }
    Py_DECREF(descr);
}

static PyObject *
call(Method *method, PyObject *self)
{
    if (method->direct != NULL && Py_IS_TYPE(self, method->type)) {
        return method->direct(self, NULL);
    }
    return PyObject_CallMethodNoArgs(self, method->name);
}

/* split(messages, one_topic): the records of a consume() result as runs of one partition,
 * [(topic, partition, [records])] in order (a partition may have several runs); None when a
 * message carries an error (the caller filters those out and asks again). One pass, one
 * call of error(), partition() and offset() per message, topic() per message only when
 * several topics are assigned (else once per run). */
static PyObject *
split(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *messages, *out, *run = NULL, *topic = NULL, *partition = NULL;
    Py_ssize_t i, n;
    int one_topic;
    Method m_error, m_partition, m_topic, m_offset;
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "split(messages: list, one_topic: bool)");
        return NULL;
    }
    messages = args[0];
    one_topic = PyObject_IsTrue(args[1]);
    if (one_topic < 0) {
        return NULL;
    }
    n = PyList_GET_SIZE(messages);
    out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    if (n > 0) {
        PyTypeObject *type = Py_TYPE(PyList_GET_ITEM(messages, 0));
        resolve(&m_error, type, s_error);
        resolve(&m_partition, type, s_partition);
        resolve(&m_topic, type, s_topic);
        resolve(&m_offset, type, s_offset);
    }
    for (i = 0; i < n; i++) {
        PyObject *message = PyList_GET_ITEM(messages, i);
        PyObject *error, *part, *offset, *record, *this_topic;
        int new_run;
        error = call(&m_error, message);
        if (error == NULL) {
            goto fail;
        }
        if (error != Py_None) {
            Py_DECREF(error);
            Py_XDECREF(topic);
            Py_XDECREF(partition);
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        Py_DECREF(error);
        part = call(&m_partition, message);
        if (part == NULL) {
            goto fail;
        }
        new_run = partition == NULL || (part != partition
                                        && PyObject_RichCompareBool(part, partition, Py_NE));
        if (new_run < 0) {
            Py_DECREF(part);
            goto fail;
        }
        if (!one_topic || new_run) {
            this_topic = call(&m_topic, message);
            if (this_topic == NULL) {
                Py_DECREF(part);
                goto fail;
            }
            if (!new_run) {
                new_run = PyObject_RichCompareBool(this_topic, topic, Py_NE);
                if (new_run < 0) {
                    Py_DECREF(part);
                    Py_DECREF(this_topic);
                    goto fail;
                }
            }
            if (new_run) {
                Py_XSETREF(topic, this_topic);
            }
            else {
                Py_DECREF(this_topic);
            }
        }
        if (new_run) {
            PyObject *entry;
            Py_XSETREF(partition, part);
            run = PyList_New(0);
            if (run == NULL) {
                goto fail;
            }
            entry = PyTuple_Pack(3, topic, partition, run);
            Py_DECREF(run);  /* the entry holds it; ``run`` is borrowed from here on */
            if (entry == NULL || PyList_Append(out, entry) < 0) {
                Py_XDECREF(entry);
                goto fail;
            }
            Py_DECREF(entry);
        }
        else {
            Py_DECREF(part);
        }
        offset = call(&m_offset, message);
        if (offset == NULL) {
            goto fail;
        }
        record = make_record(&RecordType, topic, partition, offset, message);
        Py_DECREF(offset);
        if (record == NULL || PyList_Append(run, record) < 0) {
            Py_XDECREF(record);
            goto fail;
        }
        Py_DECREF(record);
    }
    Py_XDECREF(topic);
    Py_XDECREF(partition);
    return out;
fail:
    Py_XDECREF(topic);
    Py_XDECREF(partition);
    Py_DECREF(out);
    return NULL;
}

/* Part 2: commits in order.
 *
 * CursorCore is the base of lease.CommitCursor: the four offsets a commit in order reads and
 * writes, the set of offsets committed out of order (``_done``) and ``revoked`` (the lease is
 * gone), as C fields the Python subclass reads and writes as attributes. Its commit(offset)
 * is CommitCursor's fast path; any other case calls the subclass's _commit_slow(offset).
 *
 * Committer(slow) is an at-least-once consumer's commit(record): it finds the record's
 * cursor (the last one used, else ``held[(topic, partition)].cursor``) and commits in order
 * there; anything else (a partition not held or revoked, a commit out of order, an offset
 * not handed out) is ``slow(record)``, the consumer's Python commit, whose answer it returns.
 * Between reading the cursor and writing it no Python code runs, so the coordination thread
 * (which reads ``committed`` for its heartbeats, and revokes leases) sees the commit whole or
 * not at all, as with the Python build.
 */

typedef struct {
    PyObject_HEAD
    long long expect;
    long long end;
    long long position;
    long long committed;
    PyObject *done;
    char revoked;
} CursorCore;

static PyObject *s_commit_slow, *s_cursor;

static int
CursorCore_traverse(CursorCore *self, visitproc visit, void *arg)
{
    Py_VISIT(self->done);
    return 0;
}

static int
CursorCore_clear(CursorCore *self)
{
    Py_CLEAR(self->done);
    return 0;
}

/* A Python subclass's instances come here through subtype_dealloc, which drops the
 * reference to their (heap) type itself. */
static void
CursorCore_dealloc(CursorCore *self)
{
    PyObject_GC_UnTrack(self);
    CursorCore_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
CursorCore_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    CursorCore *self = (CursorCore *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->done = PySet_New(NULL);
    if (self->done == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* The in-order commit of ``offset``: 1 done, 0 not the in-order case. */
static int
commit_in_order(CursorCore *self, long long offset)
{
    long long next;
    if (offset != self->expect || offset >= self->end || self->done == NULL
            || !PySet_CheckExact(self->done) || PySet_GET_SIZE(self->done) != 0) {
        return 0;
    }
    next = offset + 1;
    self->expect = next;
    self->committed = next < self->end ? next : self->position;
    return 1;
}

static PyObject *
CursorCore_commit(CursorCore *self, PyObject *arg)
{
    long long offset = PyLong_AsLongLong(arg);
    if (offset == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (commit_in_order(self, offset)) {
        Py_RETURN_NONE;
    }
    return PyObject_CallMethodOneArg((PyObject *)self, s_commit_slow, arg);
}

static PyMemberDef CursorCore_members[] = {
    {"expect", T_LONGLONG, offsetof(CursorCore, expect), 0,
     "The oldest handed-out offset not committed yet (== end when all are)."},
    {"end", T_LONGLONG, offsetof(CursorCore, end), 0, "One past the last handed-out offset."},
    {"position", T_LONGLONG, offsetof(CursorCore, position), 0,
     "Where fetching continues after the last handed-out batch."},
    {"committed", T_LONGLONG, offsetof(CursorCore, committed), 0, "What a heartbeat carries."},
    {"_done", T_OBJECT_EX, offsetof(CursorCore, done), 0,
     "Offsets committed out of order, above expect."},
    {"revoked", T_BOOL, offsetof(CursorCore, revoked), 0,
     "The lease of this cursor is gone: commits go to the slow path."},
    {NULL},
};

static PyMethodDef CursorCore_methods[] = {
    {"commit", (PyCFunction)CursorCore_commit, METH_O,
     "commit(offset): the application is done with the handed-out record at offset."},
    {NULL},
};

static PyTypeObject CursorCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "marshal_py.client._fastpath.CursorCore",
    .tp_doc = PyDoc_STR("The fields of a commit cursor and its commit in order."),
    .tp_basicsize = sizeof(CursorCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = CursorCore_new,
    .tp_dealloc = (destructor)CursorCore_dealloc,
    .tp_traverse = (traverseproc)CursorCore_traverse,
    .tp_clear = (inquiry)CursorCore_clear,
    .tp_members = CursorCore_members,
    .tp_methods = CursorCore_methods,
};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *slow;
    PyObject *held;
    PyObject *last_topic;
    PyObject *last_partition;
    PyObject *last_cursor;
} Committer;

static PyObject *Committer_vectorcall(PyObject *callable, PyObject *const *args,
                                      size_t nargsf, PyObject *kwnames);

static void
Committer_forget(Committer *self)
{
    Py_CLEAR(self->last_topic);
    Py_CLEAR(self->last_partition);
    Py_CLEAR(self->last_cursor);
}

static int
Committer_traverse(Committer *self, visitproc visit, void *arg)
{
    Py_VISIT(self->slow);
    Py_VISIT(self->held);
    Py_VISIT(self->last_topic);
    Py_VISIT(self->last_partition);
    Py_VISIT(self->last_cursor);
    return 0;
}

static int
Committer_clear(Committer *self)
{
    Py_CLEAR(self->slow);
    Py_CLEAR(self->held);
    Committer_forget(self);
    return 0;
}

static void
Committer_dealloc(Committer *self)
{
    PyObject_GC_UnTrack(self);
    Committer_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Committer_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *slow;
    Committer *self;
    static char *kwlist[] = {"slow", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Committer", kwlist, &slow)) {
        return NULL;
    }
    self = (Committer *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = Committer_vectorcall;
    self->slow = Py_NewRef(slow);
    self->held = PyDict_New();
    if (self->held == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* The cursor of topic/partition (a new reference), or NULL without an error set when the
 * partition is not held by a CursorCore; NULL with an error set on failure. */
static PyObject *
find_cursor(Committer *self, PyObject *topic, PyObject *partition)
{
    PyObject *key, *lease, *cursor;
    int same;
    if (self->last_cursor != NULL) {
        /* both are str: the comparison cannot fail */
        same = topic == self->last_topic || PyUnicode_Compare(topic, self->last_topic) == 0;
        if (same) {
            same = partition == self->last_partition
                   || PyObject_RichCompareBool(partition, self->last_partition, Py_EQ);
            if (same < 0) {
                return NULL;
            }
            if (same) {
                return Py_NewRef(self->last_cursor);
            }
        }
    }
    key = PyTuple_Pack(2, topic, partition);
    if (key == NULL) {
        return NULL;
    }
    lease = PyDict_GetItemWithError(self->held, key);  /* borrowed */
    Py_DECREF(key);
    if (lease == NULL) {
        return NULL;
    }
    Py_INCREF(lease);
    cursor = PyObject_GetAttr(lease, s_cursor);
    Py_DECREF(lease);
    if (cursor == NULL) {
        return NULL;
    }
    if (!PyObject_TypeCheck(cursor, &CursorCoreType)) {
        Py_DECREF(cursor);
        return NULL;
    }
    Committer_forget(self);
    self->last_topic = Py_NewRef(topic);
    self->last_partition = Py_NewRef(partition);
    self->last_cursor = Py_NewRef(cursor);
    return cursor;
}

static PyObject *
Committer_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                     PyObject *kwnames)
{
    Committer *self = (Committer *)callable;
    PyObject *record, *topic = NULL, *partition = NULL, *offset = NULL, *cursor = NULL;
    PyObject *result = NULL;
    long long value;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "commit() takes one record");
        return NULL;
    }
    record = args[0];
    if (Py_IS_TYPE(record, &RecordType)) {  /* the fields themselves, no attribute lookup */
        Record *known = (Record *)record;
        topic = Py_NewRef(known->topic);
        partition = Py_NewRef(known->partition);
        offset = Py_NewRef(known->offset);
        if (!PyLong_CheckExact(offset)) {
            goto slow;
        }
        goto found;
    }
    topic = PyObject_GetAttr(record, s_topic);
    if (topic == NULL || !PyUnicode_Check(topic)) {
        goto slow;
    }
    partition = PyObject_GetAttr(record, s_partition);
    if (partition == NULL || !PyLong_Check(partition)) {
        goto slow;
    }
    offset = PyObject_GetAttr(record, s_offset);
    if (offset == NULL || !PyLong_CheckExact(offset)) {
        goto slow;
    }
found:
    value = PyLong_AsLongLong(offset);
    if (value == -1 && PyErr_Occurred()) {
        goto slow;
    }
    cursor = find_cursor(self, topic, partition);
    if (cursor == NULL || ((CursorCore *)cursor)->revoked
            || !commit_in_order((CursorCore *)cursor, value)) {
        goto slow;
    }
    result = Py_NewRef(Py_True);
    goto done;
slow:
    /* The Python commit decides, and raises what should be raised (a record without the
     * attributes, a commit after max_poll_interval...). */
    PyErr_Clear();
    result = PyObject_CallOneArg(self->slow, record);
done:
    Py_XDECREF(topic);
    Py_XDECREF(partition);
    Py_XDECREF(offset);
    Py_XDECREF(cursor);
    return result;
}

static PyObject *
Committer_get_held(Committer *self, void *closure)
{
    return Py_NewRef(self->held);
}

static int
Committer_set_held(Committer *self, PyObject *value, void *closure)
{
    if (value == NULL || !PyDict_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "held must be a dict");
        return -1;
    }
    Py_SETREF(self->held, Py_NewRef(value));
    Committer_forget(self);
    return 0;
}

static PyGetSetDef Committer_getset[] = {
    {"held", (getter)Committer_get_held, (setter)Committer_set_held,
     "The held partitions: {(topic, partition): lease}; replace it whole.", NULL},
    {NULL},
};

static PyTypeObject CommitterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "marshal_py.client._fastpath.Committer",
    .tp_doc = PyDoc_STR("Committer(slow): commit(record) in order in C, else slow(record)."),
    .tp_basicsize = sizeof(Committer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Committer, vectorcall),
    .tp_new = Committer_new,
    .tp_dealloc = (destructor)Committer_dealloc,
    .tp_traverse = (traverseproc)Committer_traverse,
    .tp_clear = (inquiry)Committer_clear,
    .tp_call = PyVectorcall_Call,
    .tp_getset = Committer_getset,
};


/* Part 3. share_batch(): what a share member's fetching thread does with each record a poll
 * returned (Python build: marshal_py/client/share_handout.py, share_batch_py): take the
 * record's offset out of ``waiting`` (acquired, not yet fetched: offset -> delivery count),
 * skip it when it was not there; a dead-letter duty (``owed``) goes to ``duties`` as
 * (record, count); any other becomes a ShareRecord, appended to the buffer as (record, the
 * monotonic time its lock surely holds until or -1.0, drops). The ShareRecord's slots are
 * written by their offsets, found once from the type's member descriptors. */

static PyTypeObject *share_type_cached;
static Py_ssize_t share_slots[8];
static const char *share_slot_names[8] = {
    "topic", "partition", "offset", "timestamp", "key", "value", "headers", "delivery_count"};

static int
share_slot_offsets(PyTypeObject *type)
{
    if (type == share_type_cached) {
        return 0;
    }
    for (int i = 0; i < 8; i++) {
        PyObject *descr = PyDict_GetItemString(type->tp_dict, share_slot_names[i]);
        if (descr == NULL || Py_TYPE(descr) != &PyMemberDescr_Type) {
            PyErr_Format(PyExc_TypeError, "%s has no slot %s", type->tp_name,
                         share_slot_names[i]);
            return -1;
        }
        share_slots[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    share_type_cached = type;
    return 0;
}

/* The record's headers as a new list (a copy; None or empty: []). */
static PyObject *
headers_list(PyObject *raw)
{
    PyObject *copy;
    if (raw == NULL) {
        return NULL;
    }
    copy = raw == Py_None ? PyList_New(0) : PySequence_List(raw);
    Py_DECREF(raw);
    return copy;
}

static PyObject *
make_share_record(PyTypeObject *type, PyObject *r, PyObject *offset, PyObject *count)
{
    PyObject *values[8] = {NULL};
    PyObject *record;
    if (Py_TYPE(r) == &RecordType) {
        Record *c = (Record *)r;
        values[0] = Py_NewRef(c->topic);
        values[1] = Py_NewRef(c->partition);
        values[3] = Record_timestamp(c, NULL);
        values[4] = values[3] ? Record_key(c, NULL) : NULL;
        values[5] = values[4] ? Record_value(c, NULL) : NULL;
        values[6] = values[5] ? headers_list(call_message(c, s_headers)) : NULL;
    } else {
        values[0] = PyObject_GetAttr(r, s_topic);
        values[1] = values[0] ? PyObject_GetAttr(r, s_partition) : NULL;
        values[3] = values[1] ? PyObject_GetAttr(r, s_timestamp) : NULL;
        values[4] = values[3] ? PyObject_GetAttr(r, s_key) : NULL;
        values[5] = values[4] ? PyObject_GetAttr(r, s_value) : NULL;
        values[6] = values[5] ? headers_list(PyObject_GetAttr(r, s_headers)) : NULL;
    }
    values[2] = Py_NewRef(offset);
    values[7] = Py_NewRef(count);
    record = values[6] ? type->tp_alloc(type, 0) : NULL;
    if (record == NULL) {
        for (int i = 0; i < 8; i++) {
            Py_XDECREF(values[i]);
        }
        return NULL;
    }
    for (int i = 0; i < 8; i++) {
        *(PyObject **)((char *)record + share_slots[i]) = values[i];  /* steals */
    }
    return record;
}

static PyObject *
share_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *records, *waiting, *owed, *expiries, *append, *duties, *drops;
    PyTypeObject *type;
    double shift;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "share_batch() takes 8 arguments");
        return NULL;
    }
    records = args[0];
    waiting = args[1];
    owed = args[2];
    expiries = args[3];
    shift = PyFloat_AsDouble(args[4]);
    drops = args[5];
    append = args[6];
    type = (PyTypeObject *)args[7];
    if (shift == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (!PyList_Check(records) || !PyDict_Check(waiting) || !PyDict_Check(owed)
            || !PyDict_Check(expiries) || !PyType_Check(args[7])) {
        PyErr_SetString(PyExc_TypeError,
                        "share_batch(list, dict, dict, dict, float, drops, append, type)");
        return NULL;
    }
    if (share_slot_offsets(type) < 0) {
        return NULL;
    }
    duties = PyList_New(0);
    if (duties == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(records); i++) {
        PyObject *r = PyList_GET_ITEM(records, i);
        PyObject *offset, *count, *expiry, *record, *until, *entry, *done;
        int is_owed;
        offset = Py_TYPE(r) == &RecordType ? Py_NewRef(((Record *)r)->offset)
                                           : PyObject_GetAttr(r, s_offset);
        if (offset == NULL) {
            goto error;
        }
        count = PyDict_GetItemWithError(waiting, offset);
        if (count == NULL) {
            Py_DECREF(offset);
            if (PyErr_Occurred()) {
                goto error;
            }
            continue;
        }
        Py_INCREF(count);
        if (PyDict_DelItem(waiting, offset) < 0) {
            Py_DECREF(count);
            Py_DECREF(offset);
            goto error;
        }
        is_owed = PyDict_Contains(owed, offset);
        if (is_owed != 0) {
            PyObject *pair = is_owed > 0 ? PyTuple_Pack(2, r, count) : NULL;
            int failed = pair == NULL || PyList_Append(duties, pair) < 0;
            Py_XDECREF(pair);
            Py_DECREF(count);
            Py_DECREF(offset);
            if (failed) {
                goto error;
            }
            continue;
        }
        expiry = PyDict_GetItemWithError(expiries, offset);
        if (expiry == NULL && PyErr_Occurred()) {
            Py_DECREF(count);
            Py_DECREF(offset);
            goto error;
        }
        if (expiry == NULL || expiry == Py_None) {
            until = PyFloat_FromDouble(-1.0);
        } else {
            double ms = PyFloat_AsDouble(expiry);  /* (an int: converted) */
            until = ms == -1.0 && PyErr_Occurred() ? NULL
                                                   : PyFloat_FromDouble(ms / 1000 + shift);
        }
        record = until ? make_share_record(type, r, offset, count) : NULL;
        Py_DECREF(count);
        Py_DECREF(offset);
        if (record == NULL) {
            Py_XDECREF(until);
            goto error;
        }
        entry = PyTuple_New(3);
        if (entry == NULL) {
            Py_DECREF(record);
            Py_DECREF(until);
            goto error;
        }
        PyTuple_SET_ITEM(entry, 0, record);
        PyTuple_SET_ITEM(entry, 1, until);
        PyTuple_SET_ITEM(entry, 2, Py_NewRef(drops));
        done = PyObject_CallOneArg(append, entry);
        Py_DECREF(entry);
        if (done == NULL) {
            goto error;
        }
        Py_DECREF(done);
    }
    return duties;
error:
    Py_DECREF(duties);
    return NULL;
}


/* Part 4. decode_records(): the records of a kafka-python record batch (message format 2,
 * already decompressed) from byte pos, as kafka-python's ConsumerRecords, those below the
 * fetch position passed undecoded (Python build: marshal_py/client/fetch_decoding.py,
 * decode_records_py). */

/* Kafka's zigzag varint at *pos (advanced); 0 when it runs past end or past 64 bits. */
static int
read_varint(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *pos, long long *value)
{
    unsigned long long result = 0;
    int shift = 0;
    while (*pos < end) {
        unsigned char byte = buf[(*pos)++];
        result |= (unsigned long long)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *value = (long long)(result >> 1) ^ -(long long)(result & 1);
            return 1;
        }
        shift += 7;
        if (shift > 63) {
            return 0;
        }
    }
    return 0;
}


/* A length-prefixed byte string (length -1: None) at *pos, before end; NULL on error. */
static PyObject *
read_bytes(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *pos, long long *length)
{
    PyObject *out;
    if (!read_varint(buf, end, pos, length) || *length > end - *pos) {
        PyErr_SetString(PyExc_ValueError, "a field runs past its record");
        return NULL;
    }
    if (*length < 0) {
        *length = -1;
        Py_RETURN_NONE;
    }
    out = PyBytes_FromStringAndSize((const char *)buf + *pos, (Py_ssize_t)*length);
    *pos += (Py_ssize_t)*length;
    return out;
}

static PyObject *
decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Py_ssize_t pos, index, count, size, limit;
    long long base, first_ts, append_ts, start;
    int log_append;
    PyObject *prefix, *record_type, *ts_type, *out = NULL;
    const unsigned char *buf;
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "decode_records() takes 12 arguments");
        return NULL;
    }
    pos = PyLong_AsSsize_t(args[1]);
    index = PyLong_AsSsize_t(args[2]);
    count = PyLong_AsSsize_t(args[3]);
    base = PyLong_AsLongLong(args[4]);
    first_ts = PyLong_AsLongLong(args[5]);
    log_append = PyObject_IsTrue(args[6]);  /* LogAppendTime: every record's is max_ts */
    append_ts = PyLong_AsLongLong(args[7]);
    start = PyLong_AsLongLong(args[8]);
    limit = PyLong_AsSsize_t(args[9]);
    prefix = args[10];  /* (topic, partition, leader_epoch) */
    record_type = args[11];
    if (PyErr_Occurred() || log_append < 0) {
        return NULL;
    }
    if (!PyTuple_Check(prefix) || PyTuple_GET_SIZE(prefix) != 3 || !PyType_Check(record_type)
            || !PyType_IsSubtype((PyTypeObject *)record_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_records(): prefix must be a 3-tuple, record_type a tuple type");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    buf = (const unsigned char *)view.buf;
    size = view.len;
    ts_type = PyLong_FromLong(log_append);
    out = PyList_New(0);
    if (out == NULL || ts_type == NULL) {
        goto error;
    }
    while (index < count && PyList_GET_SIZE(out) < limit) {
        Py_ssize_t at = pos, after;
        long long length, ts_delta, offset_delta, key_len, value_len, header_count;
        PyObject *key = NULL, *value = NULL, *headers = NULL, *record, *items[13];
        long long header_size = 0;
        int i;
        if (!read_varint(buf, size, &at, &length) || length < 0 || length > size - at) {
            PyErr_SetString(PyExc_ValueError, "a record runs past its batch");
            goto error;
        }
        after = at + (Py_ssize_t)length;
        at += 1;  /* attributes: one byte */
        if (at > after || !read_varint(buf, after, &at, &ts_delta)
                || !read_varint(buf, after, &at, &offset_delta)) {
            PyErr_SetString(PyExc_ValueError, "a record runs past its batch");
            goto error;
        }
        if (base + offset_delta < start) {  /* below the fetch position: not decoded */
            pos = after;
            index++;
            continue;
        }
        key = read_bytes(buf, after, &at, &key_len);
        if (key == NULL) {
            goto error;
        }
        value = read_bytes(buf, after, &at, &value_len);
        if (value == NULL || !read_varint(buf, after, &at, &header_count)
                || header_count < 0) {
            if (value != NULL) {
                PyErr_SetString(PyExc_ValueError, "a record's header count is invalid");
            }
            Py_DECREF(key);
            Py_XDECREF(value);
            goto error;
        }
        headers = PyList_New(0);
        if (headers == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto error;
        }
        while (header_count-- > 0) {
            long long h_key_len, h_value_len;
            PyObject *h_key, *h_value, *pair;
            if (!read_varint(buf, after, &at, &h_key_len) || h_key_len < 0
                    || h_key_len > after - at) {
                PyErr_SetString(PyExc_ValueError, "a record header's key is invalid");
                goto record_error;
            }
            h_key = PyUnicode_DecodeUTF8((const char *)buf + at, (Py_ssize_t)h_key_len,
                                         "strict");
            if (h_key == NULL) {
                goto record_error;
            }
            at += (Py_ssize_t)h_key_len;
            h_value = read_bytes(buf, after, &at, &h_value_len);
            if (h_value == NULL) {
                Py_DECREF(h_key);
                goto record_error;
            }
            header_size += h_key_len + (h_value_len > 0 ? h_value_len : 0);
            pair = PyTuple_Pack(2, h_key, h_value);
            Py_DECREF(h_key);
            Py_DECREF(h_value);
            if (pair == NULL || PyList_Append(headers, pair) < 0) {
                Py_XDECREF(pair);
                goto record_error;
            }
            Py_DECREF(pair);
        }
        if (at != after) {
            PyErr_SetString(PyExc_ValueError, "a record's size does not match its fields");
            goto record_error;
        }
        items[0] = Py_NewRef(PyTuple_GET_ITEM(prefix, 0));
        items[1] = Py_NewRef(PyTuple_GET_ITEM(prefix, 1));
        items[2] = Py_NewRef(PyTuple_GET_ITEM(prefix, 2));
        items[3] = PyLong_FromLongLong(base + offset_delta);
        items[4] = PyLong_FromLongLong(log_append ? append_ts : first_ts + ts_delta);
        items[5] = Py_NewRef(ts_type);
        items[6] = key;
        items[7] = value;
        items[8] = headers;
        items[9] = Py_NewRef(Py_None);
        items[10] = PyLong_FromLongLong(key_len);
        items[11] = PyLong_FromLongLong(value_len);
        items[12] = PyLong_FromLongLong(PyList_GET_SIZE(headers) > 0 ? header_size : -1);
        record = NULL;
        if (items[3] && items[4] && items[10] && items[11] && items[12]) {
            record = ((PyTypeObject *)record_type)->tp_alloc((PyTypeObject *)record_type, 13);
        }
        if (record == NULL) {
            for (i = 0; i < 13; i++) {
                Py_XDECREF(items[i]);
            }
            goto error;
        }
        for (i = 0; i < 13; i++) {
            PyTuple_SET_ITEM(record, i, items[i]);
        }
        if (PyList_Append(out, record) < 0) {
            Py_DECREF(record);
            goto error;
        }
        Py_DECREF(record);
        pos = after;
        index++;
        continue;
record_error:
        Py_DECREF(key);
        Py_DECREF(value);
        Py_DECREF(headers);
        goto error;
    }
    PyBuffer_Release(&view);
    Py_DECREF(ts_type);
    return Py_BuildValue("(Nnn)", out, pos, index);
error:
    PyBuffer_Release(&view);
    Py_XDECREF(ts_type);
    Py_XDECREF(out);
    return NULL;
}


static PyMethodDef module_methods[] = {
    {"split", (PyCFunction)(void (*)(void))split, METH_FASTCALL,
     "split(messages, one_topic): the ConfluentRecords of a consume() result in runs of one "
     "partition, [(topic, partition, records)]; None when a message carries an error."},
    {"share_batch", (PyCFunction)(void (*)(void))share_batch, METH_FASTCALL,
     "share_batch(records, waiting, owed, expiries, shift, drops, append, share_type): a "
     "share member's fetched records into its buffer; returns the duties [(record, count)]."},
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL,
     "decode_records(buffer, pos, index, count, base_offset, first_timestamp, "
     "log_append_time, max_timestamp, start, limit, (topic, partition, leader_epoch), record_type): up to "
     "limit records at or after offset start, as record_type tuples; (records, pos, index)."},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "marshal_py.client._fastpath",
    .m_doc = "The per-record work of an exclusive consumer, in C (see _fastpath.c).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    PyObject *module;
    if (PyType_Ready(&RecordType) < 0 || PyType_Ready(&CursorCoreType) < 0
            || PyType_Ready(&CommitterType) < 0) {
        return NULL;
    }
    s_key = PyUnicode_InternFromString("key");
    s_value = PyUnicode_InternFromString("value");
    s_headers = PyUnicode_InternFromString("headers");
    s_timestamp = PyUnicode_InternFromString("timestamp");
    s_offset = PyUnicode_InternFromString("offset");
    s_error = PyUnicode_InternFromString("error");
    s_commit_slow = PyUnicode_InternFromString("_commit_slow");
    s_topic = PyUnicode_InternFromString("topic");
    s_partition = PyUnicode_InternFromString("partition");
    s_cursor = PyUnicode_InternFromString("cursor");
    if (!s_key || !s_value || !s_headers || !s_timestamp || !s_offset || !s_commit_slow
            || !s_topic || !s_partition || !s_cursor || !s_error) {
        return NULL;
    }
    module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "ConfluentRecord", (PyObject *)&RecordType) < 0
            || PyModule_AddObjectRef(module, "CursorCore", (PyObject *)&CursorCoreType) < 0
            || PyModule_AddObjectRef(module, "Committer", (PyObject *)&CommitterType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
