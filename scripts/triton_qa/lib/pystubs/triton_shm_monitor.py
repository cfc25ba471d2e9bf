# Stand-in for the compiled triton_shm_monitor module (built only inside NVIDIA's
# QA image).  It reports a constant free size, so shm_util.ShmLeakDetector's
# leak probe becomes a no-op on both servers (inferd has no
# triton_python_backend_shm_region_* pages anyway).
class SharedMemoryManager:
    def __init__(self, name):
        self.name = name

    def free_memory(self):
        return 0
