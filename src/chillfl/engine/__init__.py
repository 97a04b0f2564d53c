"""chillfl.engine"""
