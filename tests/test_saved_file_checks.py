"""
A saved file that ``load`` cannot open gets an error naming the file and what is wrong, before anything is built:
another library's model (SB3's DQN and SAC, sb3-contrib's QRDQN: name the algorithm and the ``load`` that opens it),
a truncated or garbled zip (the ``data`` JSON, ``policy.pth`` missing or not torch's), for ``load`` and for
``python -m sb3_ewma.enjoy``.
"""

import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from sb3_contrib import QRDQN
from stable_baselines3 import DQN, PPO, SAC

from sb3_ewma import PPG_EWMA, PPO_EWMA, MaskablePPO_EWMA, RecurrentPPO_EWMA
from sb3_ewma.common.saved_files import check_saved_file, saved_zip_problem


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Models saved by PPO_EWMA, SB3's PPO, DQN, SAC and sb3-contrib's QRDQN (untrained, tiny)."""
    folder = tmp_path_factory.mktemp("saved")
    # a dict each: SB3's off-policy constructors write use_sde into theirs
    models = {
        "ppo_ewma": PPO_EWMA(
            "MlpPolicy", "CartPole-v1", n_steps=8, batch_size=8, policy_kwargs=dict(net_arch=[4]), device="cpu"
        ),
        "ppo": PPO("MlpPolicy", "CartPole-v1", n_steps=8, batch_size=8, policy_kwargs=dict(net_arch=[4]), device="cpu"),
        "dqn": DQN("MlpPolicy", "CartPole-v1", buffer_size=10, policy_kwargs=dict(net_arch=[4]), device="cpu"),
        "sac": SAC("MlpPolicy", "Pendulum-v1", buffer_size=10, policy_kwargs=dict(net_arch=[4]), device="cpu"),
        "qrdqn": QRDQN("MlpPolicy", "CartPole-v1", buffer_size=10, policy_kwargs=dict(net_arch=[4], n_quantiles=2)),
    }
    paths = {}
    for name, model in models.items():
        paths[name] = folder / f"{name}.zip"
        model.save(paths[name])
    return paths


@pytest.mark.parametrize(
    "name, message",
    [
        # SB3: TypeError: DQNPolicy.__init__() got an unexpected keyword argument 'use_sde'
        ("dqn", r"dqn.zip was saved by SB3's DQN, not by {loader} .*: load it with stable_baselines3.DQN.load$"),
        # SB3: got multiple values for keyword argument 'use_sde'
        ("sac", r"sac.zip was saved by SB3's SAC, not by {loader} .*: load it with stable_baselines3.SAC.load$"),
        ("qrdqn", r"qrdqn.zip was saved by sb3-contrib's QRDQN, not by {loader} .*: load it with sb3_contrib.QRDQN.load$"),
    ],
)
@pytest.mark.parametrize("algorithm", [PPO_EWMA, PPG_EWMA, RecurrentPPO_EWMA, MaskablePPO_EWMA])
def test_another_librarys_model_names_its_algorithm_and_loader(
    name: str, message: str, algorithm: type, saved: dict[str, Path]
) -> None:
    with pytest.raises(ValueError, match=message.format(loader=algorithm.__name__)):
        check_saved_file(algorithm, saved[name])
    # load itself (its check: sb3_ewma.common.decoupled.proximal, through check_saved_algorithm)
    with pytest.raises(ValueError, match=message.format(loader=algorithm.__name__)):
        algorithm.load(saved[name], device="cpu")


def test_files_that_load_pass(saved: dict[str, Path]) -> None:
    assert check_saved_file(PPO_EWMA, saved["ppo_ewma"])["policy_class"]["__module__"] == "sb3_ewma.ppo_ewma.policies"
    assert check_saved_file(PPO_EWMA, saved["ppo"]) is not None  # SB3's PPO files open with PPO_EWMA
    assert check_saved_file(DQN, saved["dqn"]) is not None  # a class of SB3: its own policies
    assert saved_zip_problem(saved["ppo_ewma"]) is None
    assert saved_zip_problem(os.fspath(saved["ppo_ewma"])[: -len(".zip")]) is None  # SB3 adds .zip
    with pytest.raises(FileNotFoundError, match=r"no saved model at .*nothing.zip"):
        check_saved_file(PPO_EWMA, saved["ppo_ewma"].parent / "nothing.zip")


def rewritten(source: Path, target: Path, replace: dict[str, bytes | None]) -> Path:
    """A copy of the zip ``source`` with members replaced (``None``: left out)."""
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w") as copy:
        for member in original.namelist():
            if member in replace:
                if replace[member] is not None:
                    copy.writestr(member, replace[member])
            else:
                copy.writestr(member, original.read(member))
    return target


def test_truncated_or_garbled_files_name_the_file_and_what_is_wrong(saved: dict[str, Path], tmp_path: Path) -> None:
    original = saved["ppo_ewma"]
    content = original.read_bytes()
    cases = {
        # SB3: BadZipFile / JSONDecodeError / "Names of parameters do not match" / torch's advice on weights_only
        "truncated.zip": (None, r"it is not a zip archive \(.*\): the file is truncated, or not a saved model"),
        "garbled_data.zip": ({"data": b'{"policy_class": {'}, r"its 'data' member \(the model's settings, JSON\) is garbled"),
        "no_policy.zip": ({"policy.pth": None}, r"it has no 'policy.pth' member \(the policy's parameters\)"),
        "random_policy.zip": ({"policy.pth": os.urandom(256)}, r"its 'policy.pth' member .* is garbled: it is not a file of"),
        "no_data.zip": ({"data": None}, r"it has no 'data' member"),
    }
    for file_name, (replace, message) in cases.items():
        path = tmp_path / file_name
        if replace is None:
            path.write_bytes(content[: len(content) // 2])
        else:
            rewritten(original, path, replace)
        with pytest.raises(ValueError, match=rf"cannot load {path}: {message}"):
            check_saved_file(PPO_EWMA, path)
        with pytest.raises(ValueError, match=rf"cannot load {path}: {message}"):
            PPO_EWMA.load(path, device="cpu")
        assert path.is_file()  # nothing the user saved is touched
    # cut anywhere: said truncated (zipfile may find the zip that torch.save wrote inside policy.pth)
    for numerator in range(1, 40):
        path = tmp_path / "cut.zip"
        path.write_bytes(content[: len(content) * numerator // 40])
        with pytest.raises(ValueError, match=rf"cannot load {path}: it (is not a zip archive .*: the file )?is truncated"):
            check_saved_file(PPO_EWMA, path)
    # bytes flipped inside a member: its checksum
    flipped = bytearray(content)
    with zipfile.ZipFile(original) as archive:
        info = archive.getinfo("policy.pth")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.compress_size // 2
    flipped[start] ^= 0xFF
    (tmp_path / "flipped.zip").write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match=r"flipped.zip: its member 'policy.pth' is damaged"):
        check_saved_file(PPO_EWMA, tmp_path / "flipped.zip")
    # the same in a deflated zip, where damaged bytes may not inflate at all (zlib's error)
    with zipfile.ZipFile(original) as archive, zipfile.ZipFile(tmp_path / "deflated.zip", "w", zipfile.ZIP_DEFLATED) as copy:
        for member in archive.namelist():
            copy.writestr(member, archive.read(member))
    deflated = bytearray((tmp_path / "deflated.zip").read_bytes())
    with zipfile.ZipFile(tmp_path / "deflated.zip") as archive:
        info = archive.getinfo("policy.pth")
    for offset in range(5, 40, 7):
        damaged = bytearray(deflated)
        damaged[info.header_offset + 30 + len(info.filename) + len(info.extra) + offset] ^= 0xFF
        (tmp_path / "deflated_damaged.zip").write_bytes(bytes(damaged))
        with pytest.raises(ValueError, match=r"deflated_damaged.zip: its member 'policy.pth' is damaged"):
            check_saved_file(PPO_EWMA, tmp_path / "deflated_damaged.zip")


def test_files_sb3s_load_opens_are_not_refused(saved: dict[str, Path], tmp_path: Path) -> None:
    # policy.pth in torch.save's format before torch 1.6 (old SB3 files), and a damaged member SB3's load never reads
    import io

    import torch as th

    def legacy(member: str, content: bytes) -> bytes:
        buffer = io.BytesIO()
        th.save(th.load(io.BytesIO(content), weights_only=False), buffer, _use_new_zipfile_serialization=False)
        return buffer.getvalue()

    for name, algorithm in (("ppo", PPO), ("ppo_ewma", PPO_EWMA)):
        with zipfile.ZipFile(saved[name]) as archive:
            members = {member: archive.read(member) for member in archive.namelist()}
        old = rewritten(
            saved[name], tmp_path / f"{name}_legacy.zip", {m: legacy(m, c) for m, c in members.items() if m.endswith(".pth")}
        )
        assert saved_zip_problem(old) is None
        content = bytearray(saved[name].read_bytes())
        with zipfile.ZipFile(saved[name]) as archive:
            info = archive.getinfo("_stable_baselines3_version")
        content[info.header_offset + 30 + len(info.filename) + len(info.extra)] ^= 0x01
        damaged = tmp_path / f"{name}_damaged_version.zip"
        damaged.write_bytes(bytes(content))
        assert saved_zip_problem(damaged) is None
        for path in (old, damaged):
            for loader in (PPO, algorithm):
                assert loader.load(path, device="cpu").predict(np.zeros(4, dtype=np.float32))[0].shape == ()


def test_a_member_compressed_with_an_unknown_method_is_named(saved: dict[str, Path], tmp_path: Path) -> None:
    """zipfile refuses a compression method it has no decoder for with NotImplementedError: a message, not a crash."""
    content = bytearray(saved["ppo_ewma"].read_bytes())
    with zipfile.ZipFile(saved["ppo_ewma"]) as archive:
        info = archive.getinfo("data")
    # the method field (2 bytes, little-endian) of the member's local header and of its central directory entry
    content[info.header_offset + 8 : info.header_offset + 10] = (99).to_bytes(2, "little")
    entry = content.find(b"PK\x01\x02")
    while (
        content[entry + 46 : entry + 46 + len(b"data")] != b"data"
        or int.from_bytes(content[entry + 28 : entry + 30], "little") != 4
    ):
        entry = content.find(b"PK\x01\x02", entry + 4)
    content[entry + 10 : entry + 12] = (99).to_bytes(2, "little")
    path = tmp_path / "unknown_method.zip"
    path.write_bytes(bytes(content))
    message = r"unknown_method.zip: it is compressed with a method this Python cannot read \(.*not supported.*\)"
    with pytest.raises(ValueError, match=message):
        check_saved_file(PPO_EWMA, path)


def test_enjoy_checks_the_model_file(saved: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("rl_zoo3")
    from sb3_ewma import zoo

    run = tmp_path / "ppo_ewma" / "CartPole-v1_1"
    run.mkdir(parents=True)
    (run / "CartPole-v1.zip").write_bytes(saved["dqn"].read_bytes())
    with pytest.raises(ValueError, match=r"CartPole-v1.zip was saved by SB3's DQN, not by PPO_EWMA .*stable_baselines3.DQN"):
        zoo.enjoy(["--algo", "ppo_ewma", "--env", "CartPole-v1", "-f", str(tmp_path), "-n", "5", "--no-render"])
