"""chillfl.distillation"""
