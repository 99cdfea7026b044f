//! What a Slurm allocation gives rtune's cluster, read from the environment Slurm sets: the
//! allocated nodes (for the driver, which waits for one node agent on each) and, on each node,
//! exactly the CPUs, GPUs and memory allocated there (for that node's agent). Pure functions
//! of the environment, so the rules are tested without Slurm; `cli::slurm` starts the agents
//! with `srun` and runs the sweep.

use crate::cluster::device_list;
use crate::cluster::pool::{NodeSpec, Resources};
use crate::error::{Error, Result};

/// The custom resource (1 unit) each Slurm node agent offers, naming its node: how the driver
/// tells which allocated nodes have joined, and how a trial can be pinned to a node.
pub fn node_resource(name: &str) -> String {
    format!("{NODE_RESOURCE_PREFIX}{name}")
}

/// The node a [`node_resource`] names, for any other resource None.
pub fn node_of_resource(resource: &str) -> Option<&str> {
    resource.strip_prefix(NODE_RESOURCE_PREFIX)
}

const NODE_RESOURCE_PREFIX: &str = "node:";

/// The job this process runs in.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    pub job_id: String,
    /// Every allocated node, in Slurm's order (the batch host first).
    pub nodes: Vec<String>,
}

impl Allocation {
    /// The allocation from `SLURM_JOB_ID` and `SLURM_JOB_NODELIST`; an error saying how to get
    /// one outside a job.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Allocation> {
        let outside = |what: &str| {
            Error::config(
                "slurm",
                format!(
                    "{what} is not set: this command runs inside a Slurm job (submit it with \
                     `sbatch examples/slurm/sweep.sbatch`, or try it in `salloc -N2`)"
                ),
            )
        };
        let job_id = env("SLURM_JOB_ID").ok_or_else(|| outside("SLURM_JOB_ID"))?;
        let list = env("SLURM_JOB_NODELIST")
            .or_else(|| env("SLURM_NODELIST"))
            .ok_or_else(|| outside("SLURM_JOB_NODELIST"))?;
        let nodes = expand_hostlist(&list)
            .map_err(|e| Error::config("SLURM_JOB_NODELIST", format!("{list:?}: {e}")))?;
        if nodes.is_empty() {
            return Err(Error::config("SLURM_JOB_NODELIST", "names no node"));
        }
        Ok(Allocation { job_id, nodes })
    }
}

/// Expands a Slurm host list: `n[1-3,7],gpu[08-09],login` → n1 n2 n3 n7 gpu08 gpu09 login.
/// Zero-padded ranges keep their width; several bracket groups in one name multiply
/// (`r[1-2]n[1-2]` → r1n1 r1n2 r2n1 r2n2).
pub(crate) fn expand_hostlist(list: &str) -> std::result::Result<Vec<String>, String> {
    let mut names = Vec::new();
    for item in split_outside_brackets(list.trim()) {
        if item.is_empty() {
            continue;
        }
        names.extend(expand_one(item)?);
    }
    Ok(names)
}

/// Splits at the commas that are not inside brackets.
fn split_outside_brackets(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn expand_one(item: &str) -> std::result::Result<Vec<String>, String> {
    let Some(open) = item.find('[') else {
        if item.contains(']') {
            return Err(format!("{item:?} has a ']' without '['"));
        }
        return Ok(vec![item.to_owned()]);
    };
    let close = item[open..].find(']').map(|i| open + i).ok_or(format!("{item:?} has no ']'"))?;
    let (prefix, ranges, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let tails = expand_one(rest)?;
    let mut out = Vec::new();
    for range in ranges.split(',') {
        let (low, high) = range.split_once('-').unwrap_or((range, range));
        let parse = |s: &str| {
            s.trim().parse::<u64>().map_err(|_| format!("{range:?} in {item:?} is not a range"))
        };
        let (from, to) = (parse(low)?, parse(high)?);
        if to < from || to - from > 100_000 {
            return Err(format!("{range:?} in {item:?} is not a range"));
        }
        let width = low.trim().len();
        for n in from..=to {
            for tail in &tails {
                out.push(format!("{prefix}{n:0width$}{tail}"));
            }
        }
    }
    Ok(out)
}

/// Expands Slurm's compressed counts: `2(x3),4` → 2 2 2 4 (as in `SLURM_JOB_CPUS_PER_NODE`).
pub(crate) fn expand_counts(text: &str) -> std::result::Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("{part:?} is not a count like 4 or 4(x2)");
        let (count, times) = match part.split_once("(x") {
            Some((count, times)) => {
                (count, times.strip_suffix(')').ok_or_else(bad)?.parse().map_err(|_| bad())?)
            }
            None => (part, 1usize),
        };
        let count: u64 = count.parse().map_err(|_| bad())?;
        out.extend(std::iter::repeat_n(count, times));
    }
    Ok(out)
}

/// What Slurm allocated to the job on this node, as a node agent offers it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeAllocation {
    /// The Slurm node name (`SLURMD_NODENAME`).
    pub name: String,
    pub cpus: u64,
    /// The GPU devices allocated here, as `CUDA_VISIBLE_DEVICES` names them for this node:
    /// the agent hands its workers these, never another device of the machine.
    pub gpus: Vec<String>,
    /// `--mem` / `--mem-per-cpu`, when given.
    pub memory_bytes: Option<u64>,
}

impl NodeAllocation {
    /// Reads this node's share of the job from the environment of a task on it.
    /// `cpus_usable`: how many CPUs this process may run on (its affinity mask), which bounds
    /// what is offered when Slurm binds tasks to CPUs.
    pub fn from_env(
        env: impl Fn(&str) -> Option<String>,
        cpus_usable: u64,
    ) -> Result<NodeAllocation> {
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let name = var("SLURMD_NODENAME").ok_or_else(|| {
            Error::config("slurm", "SLURMD_NODENAME is not set: not a task of a Slurm job step")
        })?;
        // The job's CPUs on this node: a step may hold fewer, but the agent is the only task
        // of the job here and its step overlaps the job's allocation.
        let node_index: Option<usize> = var("SLURM_NODEID").and_then(|i| i.trim().parse().ok());
        let job_cpus = var("SLURM_JOB_CPUS_PER_NODE").and_then(|text| {
            let counts = expand_counts(&text).ok()?;
            counts.get(node_index?).copied()
        });
        let cpus = job_cpus
            .or_else(|| var("SLURM_CPUS_ON_NODE").and_then(|c| c.trim().parse().ok()))
            .ok_or_else(|| {
                Error::config(
                    "slurm",
                    "neither SLURM_JOB_CPUS_PER_NODE (with SLURM_NODEID) nor \
                     SLURM_CPUS_ON_NODE says how many CPUs the job has on this node",
                )
            })?
            .min(cpus_usable.max(1));
        // The GPUs: what Slurm made visible to this step, else the job's GPU ids here; no GPU
        // when Slurm gave none, whatever devices the machine has.
        let gpus = match var("CUDA_VISIBLE_DEVICES") {
            Some(list) => device_list(&list),
            None => var("SLURM_STEP_GPUS")
                .or_else(|| var("SLURM_JOB_GPUS"))
                .map_or_else(Vec::new, |l| device_list(&l)),
        };
        let megabytes = |name: &str| var(name).and_then(|m| m.trim().parse::<u64>().ok());
        let memory_bytes = megabytes("SLURM_MEM_PER_NODE")
            .or_else(|| megabytes("SLURM_MEM_PER_CPU").map(|per_cpu| per_cpu * cpus))
            .filter(|&mb| mb > 0)
            .map(|mb| mb * 1024 * 1024);
        Ok(NodeAllocation { name, cpus, gpus, memory_bytes })
    }

    /// The node agent's spec: these resources, its name as a custom resource, at `address`.
    pub fn spec(&self, address: impl Into<String>) -> NodeSpec {
        let mut resources = Resources::new().cpu(self.cpus as f64).gpu(self.gpus.len() as f64);
        resources.memory_bytes = self.memory_bytes.unwrap_or(0);
        resources.custom.insert(node_resource(&self.name), 1.0);
        NodeSpec::new(address, resources)
    }
}

/// The number of CPUs this process may run on.
pub fn affinity_cpus() -> u64 {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            return libc::CPU_COUNT(&set).max(1) as u64;
        }
    }
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

/// The address other nodes reach `node` at: its `NodeAddr` as `scontrol` reports it (what
/// Slurm itself uses), else None.
pub fn node_addr(node: &str) -> Option<String> {
    let out = std::process::Command::new("scontrol").args(["show", "node", node, "-o"]).output();
    let out = out.ok().filter(|o| o.status.success())?;
    parse_node_addr(&String::from_utf8_lossy(&out.stdout))
}

fn parse_node_addr(scontrol: &str) -> Option<String> {
    scontrol
        .split_whitespace()
        .find_map(|field| field.strip_prefix("NodeAddr="))
        .filter(|a| !a.is_empty() && *a != "(null)")
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn host_lists_expand_as_slurm_writes_them() {
        assert_eq!(expand_hostlist("n[1-2]").unwrap(), ["n1", "n2"]);
        assert_eq!(
            expand_hostlist("gpu[08-10,12],login").unwrap(),
            ["gpu08", "gpu09", "gpu10", "gpu12", "login"]
        );
        assert_eq!(expand_hostlist("r[1-2]n[1-2]").unwrap(), ["r1n1", "r1n2", "r2n1", "r2n2"]);
        assert_eq!(expand_hostlist("a,b").unwrap(), ["a", "b"]);
        assert!(expand_hostlist("n[2-1]").is_err());
        assert!(expand_hostlist("n[1-2").is_err());
        assert!(expand_hostlist("n[x]").is_err());
    }

    #[test]
    fn counts_expand() {
        assert_eq!(expand_counts("2(x3),4").unwrap(), [2, 2, 2, 4]);
        assert_eq!(expand_counts("8").unwrap(), [8]);
        assert!(expand_counts("2(x").is_err());
    }

    #[test]
    fn outside_a_job_is_a_clear_error() {
        let err = Allocation::from_env(env(&[])).unwrap_err().to_string();
        assert!(err.contains("SLURM_JOB_ID") && err.contains("sbatch"), "{err}");
        let a =
            Allocation::from_env(env(&[("SLURM_JOB_ID", "7"), ("SLURM_JOB_NODELIST", "n[1-2]")]))
                .unwrap();
        assert_eq!(a, Allocation { job_id: "7".into(), nodes: vec!["n1".into(), "n2".into()] });
    }

    #[test]
    fn an_agent_offers_the_jobs_share_of_its_node() {
        let vars = [
            ("SLURMD_NODENAME", "n2"),
            ("SLURM_NODEID", "1"),
            ("SLURM_JOB_CPUS_PER_NODE", "4,6"),
            ("SLURM_CPUS_ON_NODE", "1"),
            ("SLURM_MEM_PER_NODE", "1000"),
            ("SLURM_STEP_GPUS", "2,3"),
        ];
        let node = NodeAllocation::from_env(env(&vars), 64).unwrap();
        assert_eq!(node.name, "n2");
        assert_eq!(node.cpus, 6, "the job's CPUs on node 1, not the step's");
        assert_eq!(node.gpus, ["2", "3"]);
        assert_eq!(node.memory_bytes, Some(1000 << 20));
        let spec = node.spec("10.0.0.2");
        assert_eq!(spec.resources.gpu, 2.0);
        assert_eq!(spec.resources.custom.get("node:n2"), Some(&1.0));
        assert_eq!(node_of_resource(&node_resource("n2")), Some("n2"));
        assert_eq!(node_of_resource("GPU"), None);
        // Bound by the CPUs the task may run on.
        assert_eq!(NodeAllocation::from_env(env(&vars), 3).unwrap().cpus, 3);
    }

    #[test]
    fn no_gpu_unless_slurm_gave_one_and_memory_per_cpu_counts() {
        let vars = [
            ("SLURMD_NODENAME", "n1"),
            ("SLURM_CPUS_ON_NODE", "2"),
            ("SLURM_MEM_PER_CPU", "100"),
            ("SLURM_JOB_GPUS", ""),
        ];
        let node = NodeAllocation::from_env(env(&vars), 64).unwrap();
        assert_eq!((node.cpus, node.gpus.len()), (2, 0));
        assert_eq!(node.memory_bytes, Some(200 << 20));
        let with_visible =
            [("SLURMD_NODENAME", "n1"), ("SLURM_CPUS_ON_NODE", "2"), ("CUDA_VISIBLE_DEVICES", "1")];
        assert_eq!(NodeAllocation::from_env(env(&with_visible), 64).unwrap().gpus, ["1"]);
        let err = NodeAllocation::from_env(env(&[]), 64).unwrap_err().to_string();
        assert!(err.contains("SLURMD_NODENAME"), "{err}");
    }

    #[test]
    fn node_addr_comes_from_scontrol() {
        let line = "NodeName=n1 Arch=x86_64 CoresPerSocket=1 NodeAddr=127.0.0.1 NodeHostName=vm";
        assert_eq!(parse_node_addr(line).as_deref(), Some("127.0.0.1"));
        assert_eq!(parse_node_addr("NodeName=n1"), None);
    }
}
