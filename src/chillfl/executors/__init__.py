"""chillfl.executors: who runs a round's client updates (sequential, vectorized, processes, Ray), behind the engine's ``Executor`` seam."""
