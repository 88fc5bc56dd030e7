"""What the grader runs inside a notebook's kernel: the guard that keeps the tests' references intact."""
