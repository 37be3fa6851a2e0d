"""fit()'s inputs: local paths, ``file://`` URIs and the SDK's channel objects, by their
``config`` layout (that of ``sagemaker.inputs.TrainingInput`` / ``FileSystemInput``)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from tenter.estimator import channels, shows_logs


class TrainingInput:
    """The SDK's TrainingInput as it stores itself (sagemaker/inputs.py): only ``config``."""

    def __init__(self, s3_data: str, distribution: str | None = None, **extra: Any) -> None:
        source = {"S3DataType": "S3Prefix", "S3Uri": s3_data}
        source["S3DataDistributionType"] = distribution or "FullyReplicated"
        self.config: dict[str, Any] = {"DataSource": {"S3DataSource": source}, **extra}


class FileSystemInput:
    def __init__(self, file_system_id: str, file_system_type: str, directory_path: str) -> None:
        self.config = {
            "DataSource": {
                "FileSystemDataSource": {
                    "FileSystemId": file_system_id,
                    "FileSystemType": file_system_type,
                    "DirectoryPath": directory_path,
                    "FileSystemAccessMode": "ro",
                }
            }
        }


def test_a_single_input_is_the_training_channel() -> None:
    assert channels("file:///data/train") == {"training": "/data/train"}
    assert channels(TrainingInput("file:///data/train")) == {"training": "/data/train"}


def test_channels_take_paths_and_channel_objects() -> None:
    inputs = {
        "train": "data/train",
        "test": TrainingInput("file:///data/test"),
        "shared": FileSystemInput("fs-1", "EFS", "/mnt/efs/data"),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # their default settings are what a folder does
        found = channels(inputs)
    assert found == {"train": "data/train", "test": "/data/test", "shared": "/mnt/efs/data"}


def test_channel_settings_tenter_does_not_apply_are_named() -> None:
    sharded = TrainingInput("/data", "ShardedByS3Key", InputMode="Pipe", ShuffleConfig={"Seed": 1})
    with pytest.warns(UserWarning) as caught:
        channels({"train": sharded})
    assert [str(w.message) for w in caught] == [
        "channel 'train': not applied by tenter (every host sees the whole folder): "
        "InputMode=Pipe, ShuffleConfig={'Seed': 1}, S3DataDistributionType=ShardedByS3Key"
    ]


def test_an_s3_input_is_refused_with_the_copy_command() -> None:
    with pytest.raises(
        ValueError, match=r"^fit\(inputs\): channel 'training' is 's3://b/k', on S3"
    ):
        channels("s3://b/k")
    with pytest.raises(ValueError, match=r"aws s3 sync s3://b/t DIR"):
        channels({"test": TrainingInput("s3://b/t")})


def test_an_unknown_channel_object_is_refused_naming_its_type() -> None:
    with pytest.raises(TypeError, match=r"channel 'train' has type int; give a local path"):
        channels({"train": 3})


@pytest.mark.parametrize(
    ("logs", "shown"),
    [
        ("All", True),
        ("Training", True),
        ("None", False),
        ("Rules", False),
        (True, True),
        (False, False),
    ],
)
def test_logs_takes_the_sdk_values(logs: str | bool, shown: bool) -> None:
    assert shows_logs(logs) is shown


def test_logs_refuses_other_values() -> None:
    with pytest.raises(ValueError, match=r"^logs='all': use one of 'All', 'Training'"):
        shows_logs("all")
