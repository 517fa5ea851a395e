"""A handler for the log-forging tests: fails with the text the message's author put in its payload,
as any handler that quotes its input in an error does."""


def fail_with_payload(job):
    raise RuntimeError(job.payload["error"])
