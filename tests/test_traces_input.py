"""Bad and awkward input: one line and exit 2 through the CLI, byte-order marks accepted, truncated gzip named,
deep JSON refused, --trace-partial reading what is there."""

import gzip
import json
import zlib

import pytest

from microbench.errors import UsageError
from microbench.workload.traces import read_trace
from microbench.workload.traces.samples import json_document, kineto_comms, nccl_call

from conftest import microbench


def kineto_bytes(n_events: int, rank: int = 0) -> bytes:
    head = {"schemaVersion": 1, "distributedInfo": {"rank": rank}}
    events = [kineto_comms("allreduce", 256 + i % 4, "Float", 2, ts=i) for i in range(n_events)]
    return "".join(json_document(head, "traceEvents", events)).encode()


def test_a_json_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b"\xef\xbb\xbf" + kineto_bytes(3))
    assert read_trace(str(path)).total_calls == 3


def test_utf16_is_named(tmp_path):
    path = tmp_path / "t.log"
    path.write_bytes(nccl_call("AllReduce", 4, 7, "0xa", 2).encode("utf-16"))
    with pytest.raises(UsageError, match="UTF-16 text; convert it to UTF-8"):
        read_trace(str(path))


def truncated_gzip(tmp_path, data: bytes) -> tuple[str, int]:
    """A gzip file cut in half, and how many bytes of text its first half decompresses to."""
    whole = gzip.compress(data)
    path = tmp_path / "t.gz"
    path.write_bytes(whole[: len(whole) // 2])
    readable = len(zlib.decompressobj(31).decompress(whole[: len(whole) // 2]))
    return str(path), readable


def test_truncated_gzip_says_how_far_it_got(tmp_path):
    lines = "".join(nccl_call("AllReduce", i, 7, "0xa", 2) + "\n" for i in range(1, 20_000)).encode()
    path, readable = truncated_gzip(tmp_path, lines)
    with pytest.raises(UsageError, match=rf"truncated after {readable} bytes .*--trace-partial"):
        read_trace(path)
    report = read_trace(path, partial=True)
    whole_lines = lines[:readable].count(b"\n")
    assert report.entries in (whole_lines, whole_lines + 1)  # the last line may be cut
    assert report.total_calls >= whole_lines - 1


def test_truncated_json_with_and_without_partial(tmp_path):
    data = kineto_bytes(2000)
    path = tmp_path / "t.json"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UsageError, match=r"not valid JSON \(.*\) within its first \d+ bytes; pass --trace-partial"):
        read_trace(str(path))
    report = read_trace(str(path), partial=True)
    complete_events = data[: len(data) // 2].count(b"}}")  # each event ends with its args
    assert report.total_calls == complete_events and any("ends early" in n for n in report.notes)
    gz, _ = truncated_gzip(tmp_path, data)
    assert 0 < read_trace(gz, partial=True).total_calls < 2000


@pytest.mark.parametrize("body", [
    b'{"traceEvents": [' + b"[" * 1_000_000,  # one element a million levels deep (no closing)
    b'{"traceEvents": [{"args": ' + b'{"a": ' * 100 + b"1" + b"}" * 100 + b"}]}",
    b"[" * 70 + b"]" * 70,
])
def test_deep_json_is_refused(tmp_path, body):
    path = tmp_path / "deep.json"
    path.write_bytes(body)
    with pytest.raises(UsageError, match="JSON nested more than 64 levels deep"):
        read_trace(str(path), "kineto")


def test_nesting_of_real_traces_and_brackets_in_strings_pass(tmp_path):
    event = kineto_comms("allreduce", 4, "Float", 2)
    event["args"]["deep"] = [[[[[[[[[["]]]]{{{{ \\\" [[[["]]]]]]]]]]
    event["name"] = "void f<{lambda()#1}>[" + "[" * 100
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 1}, "traceEvents": [event] * 3}))
    assert read_trace(str(path)).total_calls == 3


def workload_cli(*args):
    return microbench("workload", *args, timeout=120)


@pytest.mark.parametrize("content,message", [
    (b"", "is empty"),
    (b"\x00\x01binary", "not a text or gzip-compressed text file"),
    (b"hello\nworld\n", "cannot tell the format"),
    (gzip.compress(b"hello", mtime=0)[:10] + b"\xff" * 20, "not a valid gzip file"),
    (b"\x1f\x8b\x08\x00", "gzip data is truncated after 0 bytes"),
    (b'{"traceEvents": [' + b"[" * 200_000, "nested more than 64 levels"),
    (b'{"traceEvents": [{"name": "x", "args": {}} {]}', "not valid JSON (parse error: after array element"),
    (b'{"traceEvents": [{"name": "\xff"}]}', "not valid JSON (lexical error: invalid bytes in UTF8 string.)"),
])
def test_bad_traces_are_one_line_through_the_cli(tmp_path, content, message):
    path = tmp_path / "t.log"
    path.write_bytes(content)
    done = workload_cli("--trace", str(path))
    assert done.returncode == 2, done.output
    assert done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith("microbench: error: ") and message in done.stderr


def test_truncated_gzip_through_the_cli(tmp_path):
    path, readable = truncated_gzip(tmp_path, "".join(nccl_call("AllReduce", i, 7, "0xa", 2) + "\n"
                                                      for i in range(1, 20_000)).encode())
    done = workload_cli("--trace", path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and f"truncated after {readable} bytes" in done.stderr
    done = workload_cli("--trace", path, "--trace-partial", "--json")
    assert done.returncode == 0, done.output
    doc = json.loads(done.stdout)
    assert doc["trace"]["calls"] > 0 and any("ends after" in n for n in doc["trace"]["notes"])
