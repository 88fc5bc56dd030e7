"""What runs on the instructor's host: build, collect, autograde orchestration (the worker pool, shards,
reports), feedback and LMS files, the speed pass and leaderboard, and the grader's commands of the
``attnlab`` command line. The gradebook and the grading workers these start are in
:mod:`attnlab.grading.worker`."""
