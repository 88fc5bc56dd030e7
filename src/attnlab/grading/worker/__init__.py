"""What runs in a grading worker process: nbgrader's steps (repair, execute), the timing stage, the job loop."""
