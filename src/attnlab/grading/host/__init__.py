"""What runs on the instructor's host: build, collect, autograde orchestration, gradebook, pool, shards,
reports, speed and leaderboard, feedback and the ``attnlab`` command line."""
