"""Burn-down of AsyncWorker (an async def handler, one process) on a queue with each --features
entry on: bench/burndown.py's --features runs `pyqueue-sql worker` (the threads' Worker) on them;
this runs the same drains, the same options and summary, with the asyncio worker instead.

    PYTHONPATH=$PWD .venv/bin/python scripts/burndown_aio.py --features plain,limit,limit8 \\
        --dialects postgresql,mysql --workloads noop --jobs 20000 --cap 60 --states fresh --rounds 2 \\
        --name burndown-aio-features
"""

from __future__ import annotations

from bench import burndown, common


def feature(name: str, dialect: str) -> burndown.System:
    """A --features entry: AsyncWorker (an async def no-op) on a queue with that feature on."""
    label = (
        "**pyqueue-sql `AsyncWorker`**, "
        + name
        + ("" if name == "plain" else f" ({common.FEATURES_SAID[name]})")
    )
    driver = burndown.DRIVERS[dialect][0]
    return burndown.System(
        f"pyqueue-async:{name}", dialect, label, "py", burndown.LIVE, peer=False, needs=driver, feature=name
    )


burndown.feature = feature

if __name__ == "__main__":
    burndown.main()
