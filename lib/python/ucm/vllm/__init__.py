"""ucm for vLLM: a KV connector that serves prompts from a ucm store and writes new prompts' blocks
back (docs/vllm.md), and `python -m ucm.vllm.precompute`.

    from vllm import LLM
    from vllm.config import KVTransferConfig
    llm = LLM(model=MODEL, kv_transfer_config=KVTransferConfig(
        kv_connector="UcmConnector", kv_connector_module_path="ucm.vllm.connector", kv_role="kv_both",
        kv_connector_extra_config={"store": "stores/python311-doc", "save": True},
        kv_load_failure_policy="recompute"))

vLLM is imported only by ucm.vllm.connector and ucm.vllm.precompute.
"""
