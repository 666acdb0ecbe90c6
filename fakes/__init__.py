"""kvreg.fakes"""
