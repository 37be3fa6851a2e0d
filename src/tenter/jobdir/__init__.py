"""The job directory: the one place every backend leaves a job, and every verb finds it.

Torch-free and backend-free, so that the lightest processes (an mpirun rank's shim, ``tenter
status``) use it without importing a launcher. :mod:`~tenter.jobdir.layout` names the files,
:mod:`~tenter.jobdir.line_files` appends the shared line files, :mod:`~tenter.jobdir.progress`
reads each rank's progress from them, :mod:`~tenter.jobdir.results` reads and writes the
outcome, :mod:`~tenter.jobdir.handle` says which backend holds the job and how to reach it,
:mod:`~tenter.jobdir.lookup` finds a job from what a user types.
"""
