//! Resource amounts: the public `f64` shape ([`Resources`]) and the internal fixed-point shape the
//! pool computes with ([`Demand`] for a bundle, [`Free`] for a node).
//!
//! CPU, GPU and custom resources are stored as integer multiples of 1/10 000 ([`UNIT`] per whole
//! unit), memory as whole bytes. Every addition and subtraction inside the pool is then exact, so a
//! node that hands out and takes back ten thousand 0.1-CPU bundles ends where it began. Converting
//! from `f64` rounds to the nearest unit (a positive amount never rounds to zero); 1/3 GPU becomes
//! 3 333 units, so three of them share one device.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::error::{PoolError, Result};

/// Internal units per whole CPU, GPU or custom resource.
pub(crate) const UNIT: u64 = 10_000;
/// Largest amount of one resource accepted in one place (keeps every sum far from `u64::MAX`).
const MAX_AMOUNT: f64 = 1e12;
/// Most GPU devices one node may declare.
pub(crate) const MAX_GPUS_PER_NODE: u64 = 4096;

pub const CPU: &str = "CPU";
pub const GPU: &str = "GPU";
pub(crate) const MEMORY: &str = "memory";

/// An amount of resources: a node's total or free capacity, or one bundle (one worker's share).
///
/// Serialises as a flat map with Ray's well-known keys, whole numbers without a fraction:
/// `{"CPU": 4, "GPU": 1}`, plus `"memory"` (bytes) when non-zero and one key per custom resource.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resources {
    /// Logical CPUs (fractions allowed).
    pub cpu: f64,
    /// GPUs: below 1 a share of one device, from 1 on a whole number of devices.
    pub gpu: f64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Custom resources by name (`"TPU"`, `"license"`, …); the well-known names are not allowed here.
    pub custom: BTreeMap<String, f64>,
}

impl Resources {
    /// No resources; add some with the builder methods.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the CPU amount.
    pub fn cpu(mut self, cpu: f64) -> Self {
        self.cpu = cpu;
        self
    }

    /// Sets the GPU amount.
    pub fn gpu(mut self, gpu: f64) -> Self {
        self.gpu = gpu;
        self
    }

    /// Sets the memory in bytes.
    pub fn memory_bytes(mut self, bytes: u64) -> Self {
        self.memory_bytes = bytes;
        self
    }

    /// Sets one custom resource.
    pub fn custom(mut self, name: impl Into<String>, amount: f64) -> Self {
        self.custom.insert(name.into(), amount);
        self
    }
}

/// Writes `v` as an integer when it is one, so totals read `{"CPU": 4}` rather than `4.0`.
fn serialize_amount<M: SerializeMap>(map: &mut M, key: &str, v: f64) -> Result<(), M::Error> {
    if v.fract() == 0.0 && (0.0..9.0e15).contains(&v) {
        map.serialize_entry(key, &(v as u64))
    } else {
        map.serialize_entry(key, &v)
    }
}

impl Serialize for Resources {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let memory = usize::from(self.memory_bytes != 0);
        let mut map = serializer.serialize_map(Some(2 + memory + self.custom.len()))?;
        serialize_amount(&mut map, CPU, self.cpu)?;
        serialize_amount(&mut map, GPU, self.gpu)?;
        if self.memory_bytes != 0 {
            map.serialize_entry(MEMORY, &self.memory_bytes)?;
        }
        for (name, v) in &self.custom {
            serialize_amount(&mut map, name, *v)?;
        }
        map.end()
    }
}

/// A JSON number that keeps integers exact (memory in bytes may exceed 2^53).
enum Number {
    U(u64),
    F(f64),
}

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a non-negative number")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Number, E> {
                Ok(Number::U(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Number, E> {
                u64::try_from(v)
                    .map(Number::U)
                    .map_err(|_| E::custom(format!("resource amount {v} is negative")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number::F(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Resources {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Resources;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(r#"a map of resource amounts such as {"CPU": 4, "GPU": 1}"#)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Resources, A::Error> {
                use serde::de::Error;
                let mut r = Resources::default();
                while let Some((key, value)) = map.next_entry::<String, Number>()? {
                    let as_f64 = match value {
                        Number::U(u) => u as f64,
                        Number::F(f) => f,
                    };
                    match key.as_str() {
                        CPU => r.cpu = as_f64,
                        GPU => r.gpu = as_f64,
                        MEMORY => {
                            r.memory_bytes = match value {
                                Number::U(u) => u,
                                Number::F(f) if f >= 0.0 && f.fract() == 0.0 && f < 1.8e19 => {
                                    f as u64
                                }
                                Number::F(f) => {
                                    return Err(A::Error::custom(format!(
                                        "memory must be a whole number of bytes, got {f}"
                                    )));
                                }
                            }
                        }
                        _ => {
                            r.custom.insert(key, as_f64);
                        }
                    }
                }
                Ok(r)
            }
        }
        d.deserialize_map(V)
    }
}

/// Converts a public amount to internal units, rejecting what could corrupt the accounting.
pub(crate) fn to_units(at: &str, resource: &str, v: f64) -> Result<u64> {
    let invalid = |reason| PoolError::InvalidAmount {
        at: at.to_owned(),
        resource: resource.to_owned(),
        value: v,
        reason,
    };
    if !v.is_finite() {
        return Err(invalid("must be a finite number"));
    }
    if v < 0.0 {
        return Err(invalid("must not be negative"));
    }
    if v > MAX_AMOUNT {
        return Err(invalid("must be at most 1e12"));
    }
    let units = (v * UNIT as f64).round() as u64;
    // A positive amount, however small, still claims something.
    Ok(if v > 0.0 && units == 0 { 1 } else { units })
}

pub(crate) fn from_units(u: u64) -> f64 {
    u as f64 / UNIT as f64
}

/// Interned custom resource names: index `i` of [`Demand::custom`] / [`Free::custom`] is `names[i]`.
#[derive(Debug, Clone, Default)]
pub struct Names {
    names: Vec<String>,
    index: std::collections::HashMap<String, u32>,
}

impl Names {
    pub fn get(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    pub(crate) fn intern(&mut self, name: &str) -> u32 {
        if let Some(i) = self.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_owned());
        self.index.insert(name.to_owned(), i);
        i
    }

    pub fn name(&self, i: u32) -> &str {
        self.names.get(i as usize).map_or("?", String::as_str)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }
}

pub(crate) fn check_custom_name(name: &str) -> Result<()> {
    if name.is_empty() || name == CPU || name == GPU || name == MEMORY {
        return Err(PoolError::ReservedName { name: name.to_owned() });
    }
    Ok(())
}

/// One bundle in internal units. `gpu` below [`UNIT`] is a share of one device; from `UNIT` on it
/// is always a whole multiple (validated), i.e. whole devices.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Demand {
    pub cpu: u64,
    pub gpu: u64,
    pub mem: u64,
    /// `(name index, units)`, sorted by index, no zero amounts.
    pub custom: Vec<(u32, u64)>,
}

impl Demand {
    /// Validates one bundle. Custom names the cluster has never seen come back in `unknown` (they
    /// make the request infeasible, which the caller reports with the bundle's index).
    pub(crate) fn from_bundle(
        bundle: usize,
        r: &Resources,
        names: &Names,
    ) -> Result<(Demand, Option<(String, f64)>)> {
        let at = format!("bundle {bundle}");
        let cpu = to_units(&at, CPU, r.cpu)?;
        let gpu = to_units(&at, GPU, r.gpu)?;
        if gpu >= UNIT && gpu % UNIT != 0 {
            return Err(PoolError::FractionalGpus { at, gpu: r.gpu });
        }
        let mut custom = Vec::with_capacity(r.custom.len());
        let mut unknown = None;
        for (name, v) in &r.custom {
            check_custom_name(name)?;
            let u = to_units(&at, name, *v)?;
            if u == 0 {
                continue;
            }
            match names.get(name) {
                Some(i) => custom.push((i, u)),
                None => {
                    unknown.get_or_insert_with(|| (name.clone(), *v));
                }
            }
        }
        custom.sort_unstable();
        let d = Demand { cpu, gpu, mem: r.memory_bytes, custom };
        if d.is_empty() && unknown.is_none() {
            return Err(PoolError::EmptyBundle { bundle });
        }
        Ok((d, unknown))
    }

    fn is_empty(&self) -> bool {
        self.cpu == 0 && self.gpu == 0 && self.mem == 0 && self.custom.is_empty()
    }

    /// Whole GPU devices needed (0 for a fractional share).
    pub(crate) fn whole_gpus(&self) -> u64 {
        if self.gpu >= UNIT { self.gpu / UNIT } else { 0 }
    }

    /// Share of one device (0 when none or whole devices).
    pub(crate) fn gpu_share(&self) -> u64 {
        if self.gpu < UNIT { self.gpu } else { 0 }
    }

    /// Order for greedy placement: biggest first (whole GPUs, then GPU share, CPU, memory).
    pub(crate) fn size_key(&self) -> (u64, u64, u64, u64) {
        (self.whole_gpus(), self.gpu_share(), self.cpu, self.mem)
    }
}

/// Which GPU devices a bundle holds and how much of each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Grant {
    pub devices: Vec<u32>,
    /// Units held on each of `devices` (`UNIT` for whole devices).
    pub(crate) per_device: u64,
}

/// A node's capacity or free resources in internal units, one entry per GPU device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Free {
    pub cpu: u64,
    pub mem: u64,
    /// Free units per device (each at most `UNIT`).
    pub gpus: Vec<u64>,
    /// Sum of `gpus`, kept up to date.
    pub(crate) gpu_sum: u64,
    /// Devices with all of `UNIT` free, kept up to date.
    pub whole: u64,
    /// Indexed by interned name; missing trailing entries are zero.
    pub custom: Vec<u64>,
}

impl Free {
    /// Capacity of a node spec, in units; interns the node's custom names.
    pub(crate) fn from_spec(r: &Resources, names: &mut Names) -> Result<Free> {
        let at = "node spec";
        let cpu = to_units(at, CPU, r.cpu)?;
        let gpu = to_units(at, GPU, r.gpu)?;
        if gpu % UNIT != 0 {
            return Err(PoolError::FractionalGpus { at: at.to_owned(), gpu: r.gpu });
        }
        let devices = gpu / UNIT;
        if devices > MAX_GPUS_PER_NODE {
            return Err(PoolError::InvalidAmount {
                at: at.to_owned(),
                resource: GPU.to_owned(),
                value: r.gpu,
                reason: "at most 4096 GPU devices per node",
            });
        }
        let mut custom_units = Vec::with_capacity(r.custom.len());
        for (name, v) in &r.custom {
            check_custom_name(name)?;
            custom_units.push((name, to_units(at, name, *v)?));
        }
        // Intern only once everything is valid, so a rejected spec leaves no trace.
        let mut custom = Vec::new();
        for (name, u) in custom_units {
            let i = names.intern(name) as usize;
            if custom.len() <= i {
                custom.resize(i + 1, 0);
            }
            custom[i] = u;
        }
        Ok(Free {
            cpu,
            mem: r.memory_bytes,
            gpus: vec![UNIT; devices as usize],
            gpu_sum: gpu,
            whole: devices,
            custom,
        })
    }

    pub fn custom(&self, i: u32) -> u64 {
        self.custom.get(i as usize).copied().unwrap_or(0)
    }

    /// Largest free share on one device.
    pub(crate) fn max_device(&self) -> u64 {
        self.gpus.iter().copied().max().unwrap_or(0)
    }

    /// Whether `d` fits now (no mutation, no allocation).
    pub fn fits(&self, d: &Demand) -> bool {
        self.cpu >= d.cpu
            && self.mem >= d.mem
            && d.custom.iter().all(|&(i, u)| self.custom(i) >= u)
            && self.gpu_fits(d)
    }

    fn gpu_fits(&self, d: &Demand) -> bool {
        let share = d.gpu_share();
        if share > 0 { self.gpus.iter().any(|&f| f >= share) } else { self.whole >= d.whole_gpus() }
    }

    /// Takes `d` if it fits and returns the devices it got; leaves `self` untouched otherwise.
    ///
    /// A share goes to the device with the least free room that still holds it (best fit: shares
    /// gather on partly used devices and whole devices stay whole); whole devices are the lowest
    /// free ids.
    pub fn take(&mut self, d: &Demand) -> Option<Grant> {
        if !self.fits(d) {
            return None;
        }
        let grant = if d.gpu_share() > 0 {
            let share = d.gpu_share();
            let (dev, _) = self
                .gpus
                .iter()
                .enumerate()
                .filter(|&(_, &f)| f >= share)
                .min_by_key(|&(i, &f)| (f, i))?;
            Grant { devices: vec![dev as u32], per_device: share }
        } else if d.whole_gpus() > 0 {
            let devices: Vec<u32> = self
                .gpus
                .iter()
                .enumerate()
                .filter(|&(_, &f)| f == UNIT)
                .map(|(i, _)| i as u32)
                .take(d.whole_gpus() as usize)
                .collect();
            Grant { devices, per_device: UNIT }
        } else {
            Grant::default()
        };
        self.cpu -= d.cpu;
        self.mem -= d.mem;
        for &(i, u) in &d.custom {
            // `fits` checked every entry exists and is large enough.
            if let Some(c) = self.custom.get_mut(i as usize) {
                *c -= u;
            }
        }
        for &dev in &grant.devices {
            let f = &mut self.gpus[dev as usize];
            if *f == UNIT {
                self.whole -= 1;
            }
            *f -= grant.per_device;
            self.gpu_sum -= grant.per_device;
        }
        Some(grant)
    }

    /// Gives back what [`take`](Self::take) handed out, never beyond `cap`.
    pub fn give(&mut self, d: &Demand, g: &Grant, cap: &Free) {
        self.cpu = (self.cpu + d.cpu).min(cap.cpu);
        self.mem = self.mem.saturating_add(d.mem).min(cap.mem);
        for &(i, u) in &d.custom {
            if let Some(c) = self.custom.get_mut(i as usize) {
                *c = (*c + u).min(cap.custom(i));
            }
        }
        for &dev in &g.devices {
            if let Some(f) = self.gpus.get_mut(dev as usize) {
                let before = *f;
                *f = (*f + g.per_device).min(UNIT);
                self.gpu_sum += *f - before;
                if *f == UNIT && before != UNIT {
                    self.whole += 1;
                }
            }
        }
    }

    /// Whether all of `ds` fit together (simulated on a copy).
    pub(crate) fn fits_all(&self, ds: &[Demand]) -> bool {
        match ds {
            [] => true,
            [d] => self.fits(d),
            _ => {
                let mut f = self.clone();
                ds.iter().all(|d| f.take(d).is_some())
            }
        }
    }

    /// Back to the public shape, naming the custom resources the node declared in `cap`.
    pub(crate) fn to_resources(&self, cap: &Free, names: &Names) -> Resources {
        let custom = (0..cap.custom.len())
            .filter(|&i| cap.custom[i] > 0)
            .map(|i| (names.name(i as u32).to_owned(), from_units(self.custom(i as u32))))
            .collect();
        Resources {
            cpu: from_units(self.cpu),
            gpu: from_units(self.gpu_sum),
            memory_bytes: self.mem,
            custom,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_well_known_keys_and_integers() {
        let r = Resources::new().cpu(4.0).gpu(1.0);
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"CPU":4,"GPU":1}"#);
        let r = Resources::new().cpu(0.5).memory_bytes(1 << 30).custom("TPU", 2.0);
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json, r#"{"CPU":0.5,"GPU":0,"memory":1073741824,"TPU":2}"#);
        let back: Resources = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
        assert!(serde_json::from_str::<Resources>(r#"{"CPU": -1}"#).is_err());
        assert!(serde_json::from_str::<Resources>(r#"{"memory": 1.5}"#).is_err());
    }

    #[test]
    fn units_round_to_nearest_and_never_to_zero() {
        assert_eq!(to_units("x", CPU, 1.0 / 3.0).unwrap(), 3333);
        assert_eq!(to_units("x", CPU, 1e-9).unwrap(), 1);
        assert_eq!(to_units("x", CPU, 0.0).unwrap(), 0);
        assert!(to_units("x", CPU, -0.1).is_err());
        assert!(to_units("x", CPU, f64::NAN).is_err());
        assert!(to_units("x", CPU, f64::INFINITY).is_err());
        assert!(to_units("x", CPU, 1e13).is_err());
    }

    #[test]
    fn take_and_give_are_exact() {
        let mut names = Names::default();
        let cap = Free::from_spec(&Resources::new().cpu(1.0).gpu(1.0), &mut names).unwrap();
        let mut f = cap.clone();
        let d = Demand { cpu: 1000, gpu: 1000, ..Demand::default() };
        let grants: Vec<Grant> = (0..10).map(|_| f.take(&d).unwrap()).collect();
        assert!(f.take(&d).is_none());
        assert_eq!((f.cpu, f.gpu_sum, f.whole), (0, 0, 0));
        for g in &grants {
            f.give(&d, g, &cap);
        }
        assert_eq!(f, cap);
    }
}
