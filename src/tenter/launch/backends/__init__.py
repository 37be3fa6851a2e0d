"""One folder per backend (local, mpi, Slurm, Kubernetes, Ray), each an implementation of
launch/api.py's protocol; mpirun.py is the command line the mpi and Kubernetes MPIJob backends
share."""
