"""chillfl.storage: run folders on disk: checkpoints, result folders, the trained model file, and what ``chillfl resume`` checks."""
