"""Client shared memory: system (POSIX) regions, and CUDA IPC regions where a GPU is."""
