//! [`RedisCluster`]: a Redis Cluster of the run's own, 3 masters and 3 replicas, whose store
//! restarts are failovers.
//!
//! Each node is a [`RedisServer`] in cluster mode with the single server's persistence (an
//! append-only file fsynced on every write) and a short node timeout, so that a replica takes
//! its master's place within a few seconds. A failover SIGKILLs a master chosen at random (from
//! the run's seed), waits for the cluster's own election to promote its replica and for every
//! node to say `cluster_state:ok`, then starts the killed node again on its files: it rejoins as
//! the new master's replica.
//!
//! Replication is asynchronous: a write the old master acknowledged may not have reached its
//! replica when it died, and the promoted replica does not have it (docs/stores.md). The check
//! measures what that costs.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use tokio::process::Command;

use super::RedisServer;
use crate::{
    Error,
    history::{FaultEvent, Recorder},
    options::RedisPersistence,
    process,
};

/// The cluster's `cluster-node-timeout`: how long a master may be unreachable before its
/// replica is promoted. Short, so that a failover takes a few seconds; long enough that a node
/// slowed down by a busy machine is not failed over by mistake.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(1500);

/// Masters, each with one replica.
const MASTERS: usize = 3;

/// How long the cluster may take to form, or to be `ok` again after a failover.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How often the cluster's state is read while waiting.
const POLL: Duration = Duration::from_millis(100);

/// A Redis Cluster on free loopback ports, its nodes' files in the run's directory.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    rng: fastrand::Rng,
}

impl RedisCluster {
    /// Every node's files' directory.
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.nodes
            .iter()
            .map(|node| node.dir().to_owned())
            .collect()
    }

    /// Starts 6 nodes with their files in `dir`, makes them a cluster of 3 masters with a
    /// replica each, and waits until every node says `cluster_state:ok`. Failovers pick their
    /// master from `seed`.
    pub async fn start(
        dir: &Path,
        persistence: RedisPersistence,
        seed: u64,
    ) -> Result<Self, Error> {
        let mut nodes = Vec::with_capacity(MASTERS * 2);
        for i in 0..MASTERS * 2 {
            let name = format!("redis-{i}");
            nodes.push(
                RedisServer::start_cluster_node(dir, &name, persistence, NODE_TIMEOUT).await?,
            );
        }
        let mut create = Command::new("redis-cli");
        create
            .arg("--cluster")
            .arg("create")
            .args(nodes.iter().map(|node| node.addr().to_string()))
            .args(["--cluster-replicas", "1", "--cluster-yes"]);
        process::run(create, "redis-cli --cluster create").await?;
        let cluster = Self {
            nodes,
            rng: fastrand::Rng::with_seed(seed),
        };
        cluster
            .wait_until("the cluster to form", |topology| {
                topology.iter().filter(|n| n.is_master()).count() == MASTERS
                    && topology.iter().filter(|n| n.is_replica()).count() == MASTERS
            })
            .await?;
        Ok(cluster)
    }

    /// `redis+cluster://HOST:PORT,…`, every node.
    pub fn url(&self) -> String {
        let addrs: Vec<String> = self.nodes.iter().map(|n| n.addr().to_string()).collect();
        format!("redis+cluster://{}", addrs.join(","))
    }

    /// SIGKILLs a master that holds keys, waits until its replica has taken over and the
    /// cluster is `ok`, and starts the killed node again as a replica. Records a [`FaultEvent::Failover`], and
    /// returns it.
    pub(crate) async fn failover(&mut self, recorder: &Recorder) -> Result<FaultEvent, Error> {
        let topology = self.topology().await?;
        let masters: Vec<&Node> = topology.iter().filter(|n| n.is_master()).collect();
        let mut holding: Vec<&Node> = Vec::new();
        for &node in &masters {
            let keys = cli(self.nodes[self.index(node.port)?].addr(), &["dbsize"]).await?;
            if keys.trim().parse::<u64>().is_ok_and(|keys| keys > 0) {
                holding.push(node);
            }
        }
        // Before the first write, any master.
        let masters = if holding.is_empty() { masters } else { holding };
        let Some(&master) = masters.get(self.rng.usize(..masters.len().max(1))) else {
            return Err(Error::Cluster("no master to fail over"));
        };
        let replicas: Vec<u16> = topology
            .iter()
            .filter(|n| n.master_id.as_deref() == Some(&master.id))
            .map(|n| n.port)
            .collect();
        let port = master.port;
        let index = self.index(port)?;
        self.nodes[index].stop().await;
        let down = recorder.now();
        self.wait_until("a replica to take over", |topology| {
            topology
                .iter()
                .any(|n| replicas.contains(&n.port) && n.is_master())
        })
        .await?;
        let promoted = recorder.now();
        self.nodes[index].start_again().await?;
        self.wait_until("the killed master to rejoin as a replica", |topology| {
            topology.iter().any(|n| n.port == port && n.is_replica())
        })
        .await?;
        // In sync with its new master, so that it can take over at the next failover.
        let addr = self.nodes[index].addr();
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        while !cli(addr, &["info", "replication"])
            .await
            .is_ok_and(|info| info.lines().any(|l| l.trim() == "master_link_status:up"))
        {
            if Instant::now() > deadline {
                return Err(Error::NotReady {
                    what: "Redis Cluster: waiting for the rejoined node's replication".to_owned(),
                    timeout: SETTLE_TIMEOUT,
                    log: self.nodes[index].log().to_owned(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
        let up = recorder.now();
        let event = FaultEvent::Failover {
            port,
            down,
            promoted,
            up,
        };
        recorder.fault(event);
        Ok(event)
    }

    /// Stops every node.
    pub async fn stop(&mut self) {
        for node in &mut self.nodes {
            node.stop().await;
        }
    }

    fn index(&self, port: u16) -> Result<usize, Error> {
        self.nodes
            .iter()
            .position(|n| n.addr().port() == port)
            .ok_or(Error::Cluster(
                "a node of its topology is not one of the run's",
            ))
    }

    /// Waits until every running node says `cluster_state:ok` and the topology, as the first
    /// running node sees it, passes `ready` (only nodes that are up and not failed count).
    async fn wait_until(
        &self,
        what: &'static str,
        ready: impl Fn(&[Node]) -> bool,
    ) -> Result<(), Error> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            if self.every_node_ok().await && self.topology().await.is_ok_and(|t| ready(&t)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::NotReady {
                    what: format!("Redis Cluster: waiting for {what}"),
                    timeout: SETTLE_TIMEOUT,
                    log: self.nodes[0].log().to_owned(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn every_node_ok(&self) -> bool {
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            match cli(node.addr(), &["cluster", "info"]).await {
                Ok(info) if info.lines().any(|l| l.trim() == "cluster_state:ok") => {}
                _ => return false,
            }
        }
        true
    }

    /// `CLUSTER NODES` as the first running node sees it.
    async fn topology(&self) -> Result<Vec<Node>, Error> {
        let addr = self
            .nodes
            .iter()
            .find(|n| n.is_running())
            .map(RedisServer::addr)
            .ok_or(Error::Cluster("no node is running"))?;
        Ok(cli(addr, &["cluster", "nodes"])
            .await?
            .lines()
            .filter_map(Node::parse)
            .collect())
    }
}

/// `redis-cli -h 127.0.0.1 -p PORT ARGS…`'s output.
async fn cli(addr: SocketAddr, args: &[&str]) -> Result<String, Error> {
    let mut command = Command::new("redis-cli");
    command
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(args);
    let output = process::run(command, "redis-cli").await?;
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A line of `CLUSTER NODES`: `ID IP:PORT@BUS FLAGS MASTER …`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    id: String,
    port: u16,
    flags: Vec<String>,
    /// The master it replicates, for a replica.
    master_id: Option<String>,
    /// Whether it serves slots.
    has_slots: bool,
}

impl Node {
    fn parse(line: &str) -> Option<Self> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [id, addr, flags, master, ..] = fields[..] else {
            return None;
        };
        let port = addr.split('@').next()?.rsplit(':').next()?.parse().ok()?;
        Some(Self {
            id: id.to_owned(),
            port,
            flags: flags.split(',').map(str::to_owned).collect(),
            master_id: (master != "-").then(|| master.to_owned()),
            has_slots: fields.len() > 8,
        })
    }

    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn is_failing(&self) -> bool {
        self.has_flag("fail") || self.has_flag("fail?") || self.has_flag("disconnected")
    }

    /// A master that serves slots and is not failing.
    fn is_master(&self) -> bool {
        self.has_flag("master") && self.has_slots && !self.is_failing()
    }

    /// A replica that is connected.
    fn is_replica(&self) -> bool {
        self.has_flag("slave") && self.master_id.is_some() && !self.is_failing()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_lines_are_read() {
        let master = Node::parse(
            "07c3 127.0.0.1:30004@40004 myself,master - 0 1426238316232 2 connected 5461-10922",
        )
        .unwrap();
        assert_eq!(master.port, 30004);
        assert!(master.is_master());
        assert!(!master.is_replica());
        let replica =
            Node::parse("6ec2 127.0.0.1:30005@40005 slave 07c3 0 1426238317239 5 connected")
                .unwrap();
        assert_eq!(replica.master_id.as_deref(), Some("07c3"));
        assert!(replica.is_replica());
        assert!(!replica.is_master());
        let failed = Node::parse(
            "67ed 127.0.0.1:30002@40002 master,fail - 1426238316232 0 1 disconnected 0-5460",
        )
        .unwrap();
        assert!(!failed.is_master());
        assert_eq!(Node::parse(""), None);
    }
}
