"""GPU kernels specq ships for the engines it drives (`w4a16`: the W4A16 linear for LMDeploy's PyTorch engine,
`lmdeploy_w4a16`: its LMDeploy-facing object). Importing this package imports nothing heavy; its modules
import torch and Triton."""
