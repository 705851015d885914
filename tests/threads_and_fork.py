"""One net of BACKEND (VARIANT) shared by 4 threads, and used in a fork() child; run as

    python tests/threads_and_fork.py BACKEND[:VARIANT,...] ...

in a fresh process (tests/test_threads.py does: TensorFlow and PyTorch do not share one). Prints
one JSON line per variant (default: the backend's default variant):
{"backend": ..., "variant": ..., "threads": ..., "fork": ...}, the last two each "same" (bit-identical
to the parent's single-thread results), "differs: <how much>", "hang" (no answer in FORK_WAIT_S),
"died: <how>" or "error: <one line>".
"""
import json
import os
import select
import sys
import threading

import numpy as np

import lenet

THREADS, ROUNDS = 4, 3
FORK_WAIT_S = 30


def predictions(net, x) -> list[np.ndarray]:
    """Logits of each single image, then of batches of 8: the two paths a backend may take."""
    return [net.predict(x[i:i + 1]) for i in range(len(x))] + [net.predict(x[i:i + 8]) for i in range(0, len(x), 8)]


def compare(got: list[np.ndarray], want: list[np.ndarray]) -> str:
    wrong = sum(not np.array_equal(g, w) for g, w in zip(got, want))
    return "same" if not wrong else f"differs: {wrong} of {len(want)} results"


def threads(net, x, want) -> str:
    """THREADS threads, each ROUNDS times over the same images, started together."""
    start, results, errors = threading.Barrier(THREADS), [], []

    def work():
        start.wait()
        for _ in range(ROUNDS):
            got = outcome(lambda: predictions(net, x))
            if isinstance(got, str):
                errors.append(got)
            else:
                results.append(got)

    pool = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        return errors[0]
    verdicts = {compare(r, want) for r in results}
    return "same" if verdicts == {"same"} else sorted(verdicts - {"same"})[-1]


def forked(net, x, want) -> str:
    """Predict in a fork() child of this process, whose net has already run (its pools started);
    where that is refused, a new net of the same backend must be refused too."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                    # the child: its verdict down the pipe, then _exit
        os.close(read)

        def load_again():
            lenet.load(net.backend, variant=net.variant)
            return "loaded"

        verdict = outcome(lambda: compare(predictions(net, x), want))
        if verdict.startswith("error: UnavailableError"):
            verdict += "; a new net: " + outcome(load_again)
        os.write(write, verdict.encode())
        os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], FORK_WAIT_S)
    verdict = os.read(read, 4096).decode() if ready else "hang"
    os.close(read)
    if not ready:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit status {os.WEXITSTATUS(status)}"
    return verdict or f"died: {how}"


def outcome(work) -> str:
    try:
        return work()
    except Exception as exc:                        # reported, as a result, not as a traceback
        return f"error: {type(exc).__name__}: {' '.join(str(exc).split())}"


def main(*specs: str) -> None:
    x = np.ascontiguousarray(lenet.data.embedded().test_x[::40])        # 25 digits of every class
    for spec in specs:
        backend, _, variants = spec.partition(":")
        for variant in variants.split(",") if variants else [lenet.backends.default_variant(backend, "cpu")]:
            net = lenet.load(backend, "cpu", variant=variant)
            want = predictions(net, x)
            print(json.dumps({"backend": backend, "variant": variant, "threads": threads(net, x, want),
                              "fork": forked(net, x, want)}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
