"""kvreg.scenarios"""
