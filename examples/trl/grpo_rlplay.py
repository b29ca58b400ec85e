"""GRPO with TRL on an rlplay environment, played over `rlplay serve`'s WebSocket protocol.

Run it:

    pip install "trl==1.13.*" peft websocket-client
    npx rlplay serve --env tool-use --max-sessions 8
    python examples/trl/grpo_rlplay.py

`--max-sessions` must cover TRL's environment pool: per_device_train_batch_size (8 here) x
steps_per_generation (1 here) x processes. RLPLAY_URL and MODEL (environment variables) point the
script at another server or model. docs/scale-out.md ("Train with TRL") explains each choice;
tests/unit/docs-recipes.test.ts keeps that page's code blocks equal to this file.
"""

import json
import os

import torch
from datasets import Dataset
from peft import LoraConfig
from trl import GRPOConfig, GRPOTrainer
from websocket import create_connection

RLPLAY_URL = os.environ.get("RLPLAY_URL", "ws://127.0.0.1:8000/ws")  # npx rlplay serve --env tool-use
MODEL = os.environ.get("MODEL", "Qwen/Qwen2.5-0.5B-Instruct")  # a chat template TRL parses tool calls from

# The score of a rollout that never stepped the environment. It must be below every return a
# played episode can reach (on tool-use: 8 unreadable actions, -0.4), or not playing becomes
# the safest thing to learn.
NO_STEP_REWARD = -1.0


class RlplayEnv:
    """One rlplay episode per rollout. TRL makes every public method except `reset` (and `get_reward`) a tool."""

    def __init__(self):
        self._socket = None
        self.reward, self.steps, self.done = 0.0, 0, False

    def reset(self, seed: int, **kwargs) -> str:
        # A fresh session per episode: TRL keeps its instances between generation batches, longer
        # than the server's --idle-timeout may allow an idle session to live.
        self._close()
        self._socket = create_connection(RLPLAY_URL)
        result = self._request("reset", {"seed": seed, "options": {"split": "train", "difficulty": 1}})
        self.reward, self.steps, self.done = 0.0, 0, False
        return result["observation"]["text"]

    def act(self, action: str) -> str:
        """
        Take one action in the environment.

        Args:
            action: One action, e.g. `lookup: fulstead`, `calc: 3 * 1200` or `answer: 3600`.

        Returns:
            What the environment shows next.
        """
        if self.done:
            return "The episode is over."
        result = self._request("step", {"action": action})
        self.steps += 1
        self.reward += result["reward"]
        self.done = result["done"]
        if self.done:
            self._close()
        return result["observation"]["text"]

    def _request(self, kind: str, data: dict) -> dict:
        self._socket.send(json.dumps({"type": kind, "data": data}))
        message = json.loads(self._socket.recv())
        if message["type"] == "error":
            raise RuntimeError(f"rlplay serve {message['data']['code']}: {message['data']['message']}")
        return message["data"]

    def _close(self):
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def environment_reward(environments, **kwargs):
    return [env.reward if env.steps > 0 else NO_STEP_REWARD for env in environments]


if __name__ == "__main__":
    # One row per episode: the seed column reaches reset(seed=...). TRL appends reset()'s text
    # directly to the prompt, hence the trailing newline.
    dataset = Dataset.from_dict({
        "prompt": [[{"role": "user", "content": "Solve the task with the act tool, one action per call.\n"}]] * 1000,
        "seed": list(range(1000)),
    })

    trainer = GRPOTrainer(
        model=MODEL,
        train_dataset=dataset,
        reward_funcs=environment_reward,
        environment_factory=RlplayEnv,
        peft_config=LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM"),
        args=GRPOConfig(
            output_dir="trl-out",
            per_device_train_batch_size=8,  # completions, not prompts: one prompt x num_generations
            num_generations=8,
            max_completion_length=512,
            bf16=torch.cuda.is_available(),  # bf16 needs a GPU; on a CPU, train in float32
        ),
    )
    trainer.train()
    trainer.save_model("trl-out/adapter")  # a PEFT adapter: adapter_config.json + adapter_model.safetensors
