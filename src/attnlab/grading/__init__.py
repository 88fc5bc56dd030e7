"""The course's pipeline: notebooks/ -> source/ -> release/ -> submitted/ -> autograded/ -> feedback/.

- :mod:`.course`: where things live in a course directory;
- :mod:`.build`: jupytext sources to nbgrader's source/ and release/ (and the staleness check);
- :mod:`.samples`: the bundled sample submissions (reference, blank, typical mistakes);
- :mod:`.abuse`: abusive sample submissions (samples/abuse/), generated from the reference;
- :mod:`.collect`: an LMS zip export -> submitted/ (``nbgrader zip_collect``);
- :mod:`.submissions`: misnamed notebooks in a submission folder matched back to the assignment's names;
- :mod:`.autograde`: nbgrader autograde, one notebook at a time (:mod:`.worker`), the report, export, feedback;
- :mod:`.repair`: nbgrader sanitising step that repairs damaged notebooks (copied cells, stripped metadata...);
- :mod:`.execute`: nbgrader's Execute step, hardened (dead or stuck kernels, time budget, isolation);
- :mod:`.guard`: runs inside the notebook's kernel and keeps the tests' references and helpers intact;
- :mod:`.cli`: the ``attnlab`` command line.
"""
