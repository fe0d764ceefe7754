"""The real-GPU check kit: planted-cause CUDA workloads under the offline agent, analysed by
the recommender, summarised in one JSON and one Markdown report (see README.md)."""
