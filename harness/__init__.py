"""kvreg.harness"""
