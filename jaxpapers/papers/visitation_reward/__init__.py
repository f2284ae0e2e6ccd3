"""Success Visitation Matching: dense process rewards from a success/failure discriminator.

Abstract 5 of the NeurIPS 2026 set (arXiv 2606.23640). See README.md in this directory.
"""
