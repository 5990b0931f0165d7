"""The embedded lab: a simulated Proxmox VE node with NVIDIA GPUs (everything here says LAB)."""
