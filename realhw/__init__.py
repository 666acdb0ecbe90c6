"""kvreg.realhw"""
