"""Trading environment: action codec, execution and costs, sizing, rewards, the batched step."""
