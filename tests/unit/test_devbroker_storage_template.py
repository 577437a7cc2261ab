"""The storage template (marshal_py.devbroker.storage_template): which settings share one,
what is kept, and what a copy holds."""

from __future__ import annotations

from pathlib import Path

from marshal_py.devbroker.storage_template import copy_template, save_template, template_dir

PROPERTIES = """\
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
log.dirs={data}/logs
"""

META = ("#\n#Sun Nov 29 15:14:35 UTC 2026\nnode.id=1\ndirectory.id=AAAA\nversion=1\n"
        "cluster.id=BBBB\n")


def _properties(data: Path, port: int, controller: int, extra: str = "") -> str:
    return PROPERTIES.format(data=data, port=port, controller=controller) + extra


def _formatted(log_dir: Path, *extra: str) -> Path:
    log_dir.mkdir(parents=True)
    (log_dir / "bootstrap.checkpoint").write_bytes(b"\x00\x01features")
    (log_dir / "meta.properties").write_text(META)
    for name in extra:
        (log_dir / name).write_text("x")
    return log_dir


def test_ports_and_the_data_directory_do_not_name_another_template(tmp_path: Path) -> None:
    lib = tmp_path / "kafka-4.3.1" / "lib"
    one = template_dir(lib, _properties(tmp_path / "a", 9092, 9093), tmp_path / "a", [])
    two = template_dir(lib, _properties(tmp_path / "b", 41000, 41001), tmp_path / "b", [])
    assert one is not None and one == two and one.parent == lib.parent
    assert one.name.startswith("storage-")


def test_other_settings_name_another_template_and_format_arguments_none(
        tmp_path: Path) -> None:
    lib = tmp_path / "kafka-4.3.1" / "lib"
    data = tmp_path / "a"
    plain = template_dir(lib, _properties(data, 9092, 9093), data, [])
    other = template_dir(lib, _properties(data, 9092, 9093, "log.cleaner.enable=false\n"),
                         data, [])
    assert plain != other
    assert template_dir(lib, _properties(data, 9092, 9093), data,
                        ["--add-scram", "SCRAM-SHA-512=[name=a,password=b]"]) is None


def test_a_format_of_the_two_files_is_kept_and_copied_with_ids_of_its_own(
        tmp_path: Path) -> None:
    template = tmp_path / "storage-0123"
    save_template(template, _formatted(tmp_path / "first" / "logs"))
    assert sorted(p.name for p in template.iterdir()) == ["bootstrap.checkpoint",
                                                          "meta.properties"]
    assert not list(tmp_path.glob(".storage-*"))  # the scratch copy was renamed into place
    target = tmp_path / "second" / "logs"
    assert copy_template(template, target, "NEWCLUSTER", new_id=lambda: "NEWDIR")
    assert (target / "bootstrap.checkpoint").read_bytes() == b"\x00\x01features"
    meta = (target / "meta.properties").read_text().splitlines()
    assert "cluster.id=NEWCLUSTER" in meta and "directory.id=NEWDIR" in meta
    assert "node.id=1" in meta and "version=1" in meta
    assert not any(line.endswith(("=AAAA", "=BBBB")) for line in meta)


def test_a_storage_of_another_shape_is_not_kept(tmp_path: Path) -> None:
    template = tmp_path / "storage-0123"
    save_template(template, _formatted(tmp_path / "first" / "logs", "__cluster_metadata-0"))
    assert not template.exists()


def test_a_template_already_there_is_not_replaced(tmp_path: Path) -> None:
    template = tmp_path / "storage-0123"
    save_template(template, _formatted(tmp_path / "first" / "logs"))
    second = _formatted(tmp_path / "second" / "logs")
    (second / "bootstrap.checkpoint").write_bytes(b"other")
    save_template(template, second)
    assert (template / "bootstrap.checkpoint").read_bytes() == b"\x00\x01features"


def test_no_template_or_an_unknown_one_formats_nothing(tmp_path: Path) -> None:
    target = tmp_path / "logs"
    assert not copy_template(tmp_path / "storage-none", target, "C", new_id=lambda: "D")
    odd = tmp_path / "storage-odd"
    odd.mkdir()
    (odd / "bootstrap.checkpoint").write_bytes(b"x")
    (odd / "meta.properties").write_text("node.id=1\n")
    assert not copy_template(odd, target, "C", new_id=lambda: "D")
    (odd / "meta.properties").write_text(META)
    (odd / "bootstrap.checkpoint").write_bytes(b"")  # a write cut short
    assert not copy_template(odd, target, "C", new_id=lambda: "D")
    assert not (target / "meta.properties").exists()
