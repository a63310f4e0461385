"""``%gpu_plan``: a training step measured on fake tensors, per strategy (``magic`` parses and
answers, ``planner`` runs the strategies, ``step`` measures one step with torch's trackers,
``fake_world`` brings the model and batch into fake tensors, ``fake_group`` fakes N ranks for FSDP,
``device_memory`` finds the free memory without initialising CUDA)."""
