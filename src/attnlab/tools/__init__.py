"""The learner's and instructor's tools above the course: ``attnlab doctor``, ``attnlab lab``, ``attnlab selfcheck``."""
