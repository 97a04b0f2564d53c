"""chillfl.training"""
