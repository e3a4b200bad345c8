"""Custom rewards for the NeMo-RL job: the `closeness` reward of notebook 08, as a module the job can carry.

A reward defined in a notebook cell exists only in that kernel. To score the real run with it, keep it in a module
like this one and name it in the experiment:

    trainer:
      reward_module: my_rewards.py          # relative to the experiment file; shipped in the job's py_modules
      reward_functions:                     # NeMo-RL's shape, resolved in nbtools' reward registry
        - {name: exact_answer, weight: 0.7}     # reads \\boxed{} (what NeMo-RL's cot.txt asks for) and <answer> tags
        - {name: closeness, weight: 0.3, kwargs: {scale: 9.0}}

Importing the module registers its rewards (here and, through nbtools.rewards.nemo_rl_env, in the job).
"""

import nbtools


@nbtools.rewards.register("closeness")
def closeness(ground_truth: str, response: str, scale: float = 9.0) -> tuple[float, bool | None]:
    """1 - |answer - truth| / scale for integer answers (at least 0); 0 when there is no integer answer.

    The answer is the ``<answer>`` tag's content, else the last ``\\boxed{}`` (the format NeMo-RL's cot.txt asks for).
    """
    answer = nbtools.rewards.extract_answer(response)
    if answer is None:
        answer = nbtools.rewards.last_boxed(response)
        answer = None if answer is None else answer.strip()
    if answer is None or not answer.isdigit() or not ground_truth.isdigit() or len(answer) > 30:
        return 0.0, None  # more than 30 digits is no answer (and int() refuses 4,300+ digits)
    return max(0.0, 1.0 - abs(int(answer) - int(ground_truth)) / scale), None
