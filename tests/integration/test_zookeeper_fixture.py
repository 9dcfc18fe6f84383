from dlog.sandbox.zookeeper import ZooKeeperServer
from dlog.zk import NodeExistsError, ZooKeeper


async def test_zookeeper_answers_and_counts_writes(
    zk_server: ZooKeeperServer, zk: ZooKeeper, zk_root: str
) -> None:
    before = zk_server.zxid()
    await zk.create(zk_root, b"x")
    assert await zk.get(zk_root) == (b"x", (await zk.get(zk_root))[1])
    assert zk_server.zxid() == before + 1
    try:
        await zk.create(zk_root, b"y")
    except NodeExistsError:
        pass
    else:
        raise AssertionError("second create must fail")
