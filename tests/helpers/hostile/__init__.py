"""The hostile suite's cases and judge (suite.py: the groups and the case
registry; judge.py: how a case runs and the criteria it is judged by), run
by tests/test_hostile_suite.py."""
