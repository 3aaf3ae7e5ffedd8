//! The lookup indexes over the pod entries, kept current one entry at a time: adding or
//! removing a pod touches the keys it is filed under (its name, its `generateName`, its
//! addresses, its controller) and nothing else, so that a change costs what it touches,
//! not what the cluster holds.
//!
//! An index key is settled (its group's representative chosen, its address timeline
//! ordered) once per batch of changes, in [`ClusterSnapshot::settle`]. Every choice depends
//! on the entries alone, never on their slots, so a snapshot changed step by step answers
//! exactly as one built at once from the same state.

use std::net::IpAddr;

use foldhash::HashSet;

use ne_flow::flow::{Str, Timestamp, WorkloadRef};

use super::{ClusterSnapshot, PodEntry, Slot};

/// The pods of one `generateName` and what the name resolves to.
#[derive(Clone, Debug)]
pub(super) struct Group {
    pub slot: Slot,
    members: Vec<usize>,
}

/// What names a workload as its controller: live pods (slots) and workload objects.
#[derive(Clone, Debug, Default)]
pub(super) struct Dependents {
    pub pods: Vec<usize>,
    pub workloads: Vec<WorkloadRef>,
}

impl Dependents {
    fn is_empty(&self) -> bool {
        self.pods.is_empty() && self.workloads.is_empty()
    }
}

/// Keys whose entries changed since the last [`ClusterSnapshot::settle`].
#[derive(Debug, Default)]
pub(super) struct Unsettled {
    pub groups: HashSet<(Str, Str)>,
    pub ips: HashSet<IpAddr>,
}

/// Removes one `x` from an unordered list.
pub(super) fn drop_one<T: PartialEq>(list: &mut Vec<T>, x: &T) {
    if let Some(at) = list.iter().position(|y| y == x) {
        list.swap_remove(at);
    }
}

impl PodEntry {
    /// Order among pods of one name: by start; a gone pod before a live one that started
    /// at the same time; then by uid.
    fn age(&self) -> (i64, bool, Option<&str>) {
        (
            self.life.start.unwrap_or(i64::MIN),
            !self.gone,
            self.uid.as_deref(),
        )
    }

    /// The group's representative: live before gone, then the first by name and uid.
    fn rank(&self) -> (bool, &str, Option<&str>) {
        (self.gone, &self.name, self.uid.as_deref())
    }

    /// The entry of the pod once gone: ended at `now` at the latest, and no longer tied to
    /// its object or its controller.
    pub(super) fn into_gone(mut self, now: Timestamp) -> PodEntry {
        self.gone = true;
        self.life.end = Some(self.life.end.map_or(now.0, |e| e.min(now.0)));
        self.object = None;
        self.controller = None;
        self.bad_ips = 0;
        self
    }
}

/// Holders in slots; `None` never appears behind an index.
pub(super) fn held(pods: &[Option<PodEntry>], i: usize) -> &PodEntry {
    pods[i]
        .as_ref()
        .expect("the indexes point at held entries only")
}

impl ClusterSnapshot {
    /// Files `entry` under its keys and returns its slot.
    pub(super) fn insert(&mut self, entry: PodEntry) -> usize {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.pods.push(None);
                self.pods.len() - 1
            }
        };
        let (namespace, name) = (entry.namespace.clone(), entry.name.clone());
        self.skipped += entry.bad_ips;
        if let Some(prefix) = &entry.generate_name {
            let groups = self.groups.entry(namespace.clone()).or_default();
            let group = groups.entry(prefix.clone()).or_insert(Group {
                slot: Slot::Ambiguous,
                members: Vec::new(),
            });
            group.members.push(i);
            self.unsettled
                .groups
                .insert((namespace.clone(), prefix.clone()));
        }
        if entry.addressable {
            for ip in &entry.ips {
                self.by_ip.entry(*ip).or_default().add(i);
                self.unsettled.ips.insert(*ip);
            }
        }
        if !entry.gone
            && let Some(controller) = &entry.controller
        {
            let dependents = self.dependents.entry(controller.clone()).or_default();
            dependents.pods.push(i);
        }
        self.pods[i] = Some(entry);
        let pods = &self.pods;
        let same = self
            .by_name
            .entry(namespace)
            .or_default()
            .entry(name)
            .or_default();
        same.push(i);
        same.sort_by(|&a, &b| held(pods, a).age().cmp(&held(pods, b).age()));
        i
    }

    /// Takes the entry in slot `i` out of every index.
    pub(super) fn remove(&mut self, i: usize) -> PodEntry {
        let entry = self.pods[i].take().expect("only held entries are removed");
        self.free.push(i);
        self.skipped -= entry.bad_ips;
        if let Some(names) = self.by_name.get_mut(&entry.namespace) {
            if let Some(same) = names.get_mut(&entry.name) {
                // Keeps the order: the list is short (one name's pods).
                same.retain(|&x| x != i);
                if same.is_empty() {
                    names.remove(&entry.name);
                }
            }
            if names.is_empty() {
                self.by_name.remove(&entry.namespace);
            }
        }
        if let Some(prefix) = &entry.generate_name
            && let Some(groups) = self.groups.get_mut(&entry.namespace)
        {
            if let Some(group) = groups.get_mut(prefix) {
                drop_one(&mut group.members, &i);
                if group.members.is_empty() {
                    groups.remove(prefix);
                } else {
                    let key = (entry.namespace.clone(), prefix.clone());
                    self.unsettled.groups.insert(key);
                }
            }
            if groups.is_empty() {
                self.groups.remove(&entry.namespace);
            }
        }
        if entry.addressable {
            for ip in &entry.ips {
                if let Some(holders) = self.by_ip.get_mut(ip) {
                    holders.drop_member(i);
                    if holders.is_empty() {
                        self.by_ip.remove(ip);
                    } else {
                        self.unsettled.ips.insert(*ip);
                    }
                }
            }
        }
        if !entry.gone
            && let Some(controller) = &entry.controller
            && let Some(dependents) = self.dependents.get_mut(controller)
        {
            drop_one(&mut dependents.pods, &i);
            if dependents.is_empty() {
                self.dependents.remove(controller);
            }
        }
        entry
    }

    /// Records that workload `child` names `parent` as its controller (`add`), or no
    /// longer does.
    pub(super) fn link(&mut self, parent: &WorkloadRef, child: &WorkloadRef, add: bool) {
        if add {
            let dependents = self.dependents.entry(parent.clone()).or_default();
            dependents.workloads.push(child.clone());
        } else if let Some(dependents) = self.dependents.get_mut(parent) {
            drop_one(&mut dependents.workloads, child);
            if dependents.is_empty() {
                self.dependents.remove(parent);
            }
        }
    }

    /// The slot of the live pod of that name, if any.
    pub(super) fn live_named(&self, namespace: &str, name: &str) -> Option<usize> {
        let same = self.by_name.get(namespace)?.get(name)?;
        same.iter().rev().copied().find(|&i| !self.pod(i).gone)
    }

    /// Settles every key touched since the last call: chooses each group's representative
    /// and orders each address's holders.
    pub(super) fn settle(&mut self) {
        let pods = &self.pods;
        for (namespace, prefix) in std::mem::take(&mut self.unsettled.groups) {
            let Some(group) = self
                .groups
                .get_mut(&namespace)
                .and_then(|g| g.get_mut(&prefix))
            else {
                continue;
            };
            let first = group
                .members
                .iter()
                .copied()
                .min_by(|&a, &b| held(pods, a).rank().cmp(&held(pods, b).rank()));
            group.slot = match first {
                Some(first)
                    if group
                        .members
                        .iter()
                        .all(|&i| held(pods, i).owner == held(pods, first).owner) =>
                {
                    Slot::Pod(first)
                }
                _ => Slot::Ambiguous,
            };
        }
        for ip in std::mem::take(&mut self.unsettled.ips) {
            if let Some(holders) = self.by_ip.get_mut(&ip) {
                holders.settle(pods);
            }
        }
    }
}
