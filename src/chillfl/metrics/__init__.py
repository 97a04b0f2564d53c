"""chillfl.metrics"""
