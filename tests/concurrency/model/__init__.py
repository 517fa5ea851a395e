"""The stateful model of the whole contract, by topic (tests/concurrency/test_model.py runs it).

Each module holds the rules of one topic of docs/contract.md as a mixin of the state machine; each
rule names the routines it calls through ``covers`` (coverage.py), and
tests/concurrency/test_model_coverage.py fails when a routine that changes state in either
dialect's catalog has no rule."""
