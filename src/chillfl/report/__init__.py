"""chillfl.report"""
