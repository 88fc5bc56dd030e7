"""The course's pipeline: notebooks/ -> source/ -> release/ -> submitted/ -> autograded/ -> feedback/.

Split by where the code runs (as otter-grader's grade / run / execute), each part importing only those
listed before it (tests/test_layers.py):

- :mod:`.kernel`: inside the notebook's kernel: the guard that keeps the tests' references and helpers
  intact, and the limits it sets there;
- :mod:`.course`: where things live in a course directory, and the environment names every part reads;
- :mod:`.sandbox`: bubblewrap around each kernel, kernel accounts, the fork server, task and memory bounds;
- :mod:`.worker`: one grading worker: nbgrader's steps (:mod:`.worker.repair`, :mod:`.worker.execute`),
  the job loop (:mod:`.worker.jobs`), the timing stage, the gradebook nbgrader writes;
- :mod:`.host`: the instructor's machine: build, collect, autograde (pool, contention, reports), export,
  feedback, shards, speed and leaderboard, the grader's commands (:mod:`.host.cli`);
- :mod:`.samples`, :mod:`.abuse`: the bundled sample submissions (reference, blank, typical mistakes) and
  the abusive ones, generated from the reference.
"""
