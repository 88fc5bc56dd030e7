"""The course's pipeline: notebooks/ -> source/ -> release/ -> submitted/ -> autograded/.

- :mod:`.course`: where things live in a course directory;
- :mod:`.build`: jupytext sources to nbgrader's source/ and release/ (and the staleness check);
- :mod:`.samples`: the bundled sample submissions (reference, blank, typical mistakes);
- :mod:`.autograde`: nbgrader autograde, one notebook at a time, and the report;
- :mod:`.cli`: the ``attnlab`` command line.
"""
