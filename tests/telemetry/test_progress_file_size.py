"""The agent reads a job's progress file every tick: a file the job let grow (lines appended,
a bare count per line, which the agent reads by its last line; or anything else written
there) is read by its end, at a bounded cost, as the job's log tail is; and a file that is
no regular file (a named pipe the job put there) is no progress and blocks nothing.

Found by a probe: ``read_progress`` read the whole file. A job that appended its count
every step had, after 20 million steps, a 169 MB file, which took the agent 4.8 s and
1.7 GB of memory every tick, for every such job on the node; a larger one stalls the tick
that samples every GPU and heart-beats, or kills the agent and every job with it."""

import os
import threading
import time
import tracemalloc

from telemetry.agent.jobs import ProcessJob, read_progress
from telemetry.agent.runners import CannotStart, ProcessRunner

# Far more than a bounded read takes, far less than the files below.
BOUNDED = 2 * 1024 * 1024


def _peak_bytes(call):
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_grown_file_of_counts_is_read_by_its_last_line_at_a_bounded_cost(tmp_path):
    # given 64 MB of earlier output, then the job's last count
    path = tmp_path / "progress"
    with path.open("wb") as f:
        f.write(b"7\n" * (32 * 1024 * 1024))
        f.write(b"123456\n")
    started = time.perf_counter()
    progress, peak = _peak_bytes(lambda: read_progress(path))
    # then the count is the last line's, read without the file's 64 MB (before: 64 MB of
    # bytes, its text and its 32 million lines in memory at once)
    assert progress is not None and progress.iterations == 123456.0
    assert peak < BOUNDED
    assert time.perf_counter() - started < 1.0


def test_a_json_object_is_read_as_before_and_a_huge_one_is_no_progress(tmp_path):
    path = tmp_path / "progress"
    path.write_text(
        '{"iterations": 130.0, "ts": 1795709196.58, "grad_sqr": 0.002, "grad_var": 0.01}'
    )
    progress = read_progress(path)
    assert (progress.iterations, progress.grad_sqr, progress.at) == (130.0, 0.002, 1795709196.58)
    # a "progress object" padded past any real one is not read whole (nor taken)
    path.write_text('{"iterations": 5, "pad": "' + "x" * (16 * 1024 * 1024) + '"}')
    progress, peak = _peak_bytes(lambda: read_progress(path))
    assert progress is None
    assert peak < BOUNDED


def test_a_tail_that_starts_mid_character_is_still_read(tmp_path):
    # the tail's first line may begin inside a multi-byte character: it is dropped whole
    path = tmp_path / "progress"
    with path.open("wb") as f:
        f.write(("é" * 300_001 + "\n").encode())
        f.write(b"42\n")
    assert read_progress(path).iterations == 42.0


def _returns_within(call, seconds: float, unblock) -> tuple[bool, object]:
    """Whether ``call`` returned within ``seconds`` (and what), run in a thread; ``unblock``
    then frees a thread still blocked, so the test never hangs."""
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("value", call()), daemon=True)
    thread.start()
    thread.join(seconds)
    returned = not thread.is_alive()
    unblock()
    thread.join(5)
    return returned, out.get("value")


def _writer_opens(fifo):
    def unblock():
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # no reader waits: nothing to free
            pass

    return unblock


def test_a_fifo_for_a_progress_file_does_not_block_the_agent(tmp_path):
    # given a job that made its progress file a named pipe: opened for reading, it waits for
    # a writer, and the agent's tick (every GPU's samples, the heartbeat, every job) with it
    fifo = tmp_path / "progress"
    os.mkfifo(fifo)
    returned, progress = _returns_within(lambda: read_progress(fifo), 2.0, _writer_opens(fifo))
    # then it is no progress file (before: the read waited for good)
    assert returned
    assert progress is None


def test_a_fifo_for_a_log_file_does_not_block_the_exit(tmp_path):
    job = ProcessJob.__new__(ProcessJob)
    job.log_file = tmp_path / "log.txt"
    os.mkfifo(job.log_file)
    returned, tail = _returns_within(job.log_tail, 2.0, _writer_opens(job.log_file))
    assert returned
    assert tail == ""


def test_a_job_whose_folder_holds_a_fifo_log_cannot_start_and_says_so(tmp_path):
    # given a job that left a named pipe where its log goes (its folder outlives an
    # allocation): opened to append the next run's output, it waited for a reader, and the
    # agent's tick with it (before: blocked for good, the job never reported)
    runner = ProcessRunner(tmp_path, stop_grace_s=1.0)
    folder = tmp_path / "jobs" / "7"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "log.txt")
    assignment = {
        "allocation_id": 1, "job_id": 7, "command": "true", "gpu_uuids": ["GPU-0"],
        "gpu_count": 1, "batch_size": 256, "checkpoint_dir": str(tmp_path / "ckpt"),
        "total_iterations": 100, "completed_iterations": 0.0, "env": {},
    }  # fmt: skip

    def start():
        try:
            runner.start(assignment, [0])
        except CannotStart as exc:
            return exc
        return None

    def unblock():
        try:  # a reader frees a writer blocked in open
            os.close(os.open(folder / "log.txt", os.O_RDONLY | os.O_NONBLOCK))
        except OSError:
            pass

    returned, refused = _returns_within(start, 2.0, unblock)
    # then the start is refused with the reason, which the agent reports as the job's failure
    assert returned
    assert isinstance(refused, CannotStart)
    assert "log.txt" in str(refused)
    assert 7 not in runner.jobs
