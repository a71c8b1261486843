//! [`Offsets`]: what a subscription holds of each partition, so that an offset is stored only
//! once every message before it is settled.
//!
//! Kafka commits one offset per partition: everything before it counts as done. A subscription
//! that holds several messages of a partition at once may see them settled in any order, and
//! storing the offset of a later one while an earlier one is still being handled would commit the
//! earlier one unprocessed (lost, after a crash). So each settlement marks its message, and the
//! offset stored is the last of the messages settled without a gap from the partition's start.

use std::collections::{BTreeMap, HashMap};

/// The messages handed over and not yet stored, per partition of the subscription's topic.
#[derive(Debug, Default)]
pub(super) struct Offsets {
    partitions: HashMap<i32, Partition>,
    /// The last generation given to a partition.
    generations: u64,
}

/// One partition since it was assigned to the consumer.
#[derive(Debug)]
struct Partition {
    /// Which assignment of the partition this is: a message of an earlier one cannot store.
    generation: u64,
    /// The next offset to read, as last stored: a message before it was stored past already.
    stored: Option<i64>,
    /// The messages handed over and not stored yet, by offset: whether each is settled.
    held: BTreeMap<i64, bool>,
}

/// A message's partition was revoked (or assigned anew) since the message was handed over: its
/// offset is no longer this consumer's to store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Revoked;

impl Offsets {
    /// The message at `offset` of `partition` is handed over; the generation of its partition,
    /// for [`settle`](Self::settle). A message before what was stored already (a copy of one
    /// sought back past) is not held: its settlement stores nothing.
    pub(super) fn deliver(&mut self, partition: i32, offset: i64) -> u64 {
        let generations = &mut self.generations;
        let partition = self.partitions.entry(partition).or_insert_with(|| {
            *generations += 1;
            Partition {
                generation: *generations,
                stored: None,
                held: BTreeMap::new(),
            }
        });
        if partition.stored.is_none_or(|stored| offset >= stored) {
            // A copy of a message settled already stays settled: one run of it is enough.
            partition.held.entry(offset).or_insert(false);
        }
        partition.generation
    }

    /// The message at `offset` of `partition`, handed over in `generation`, is settled (acked or
    /// rejected): the offset to store now, if any (the last of the messages settled without a
    /// gap), or none while an earlier message is unsettled.
    pub(super) fn settle(
        &mut self,
        partition: i32,
        offset: i64,
        generation: u64,
    ) -> Result<Option<i64>, Revoked> {
        let partition = match self.partitions.get_mut(&partition) {
            Some(partition) if partition.generation == generation => partition,
            _ => return Err(Revoked),
        };
        let Some(settled) = partition.held.get_mut(&offset) else {
            return Ok(None);
        };
        *settled = true;
        let mut last = None;
        while let Some(first) = partition.held.first_entry() {
            if !*first.get() {
                break;
            }
            last = Some(first.remove_entry().0);
        }
        if let Some(last) = last {
            partition.stored = Some(last + 1);
        }
        Ok(last)
    }

    /// `partitions` were revoked or assigned: what was held of them is forgotten, and their
    /// messages handed over before cannot store.
    pub(super) fn forget(&mut self, partitions: impl IntoIterator<Item = i32>) {
        for partition in partitions {
            self.partitions.remove(&partition);
        }
    }

    /// How many messages are held, settled or not: what a long-unsettled message keeps.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.partitions.values().map(|p| p.held.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_is_stored_once_every_message_before_it_is_settled() {
        let mut offsets = Offsets::default();
        let generation = offsets.deliver(0, 5);
        assert_eq!(offsets.deliver(0, 6), generation);
        assert_eq!(offsets.deliver(0, 7), generation);
        // 6 and 7 are done, 5 is still being handled: nothing can be committed.
        assert_eq!(offsets.settle(0, 7, generation), Ok(None));
        assert_eq!(offsets.settle(0, 6, generation), Ok(None));
        assert_eq!(offsets.held(), 3);
        // 5 done: everything up to 7.
        assert_eq!(offsets.settle(0, 5, generation), Ok(Some(7)));
        assert_eq!(offsets.held(), 0);
        // In order, each stores itself.
        offsets.deliver(0, 8);
        assert_eq!(offsets.settle(0, 8, generation), Ok(Some(8)));
    }

    #[test]
    fn partitions_are_stored_apart() {
        let mut offsets = Offsets::default();
        let zero = offsets.deliver(0, 10);
        let one = offsets.deliver(1, 3);
        assert_ne!(zero, one);
        assert_eq!(offsets.settle(1, 3, one), Ok(Some(3)));
        assert_eq!(offsets.settle(0, 10, zero), Ok(Some(10)));
    }

    #[test]
    fn a_requeued_message_holds_the_offset_back_until_its_copy_is_settled() {
        let mut offsets = Offsets::default();
        let generation = offsets.deliver(0, 5);
        offsets.deliver(0, 6);
        // 5 is requeued (not settled); 6 is done.
        assert_eq!(offsets.settle(0, 6, generation), Ok(None));
        // The seek back hands 5 and 6 over again: 6 stays settled.
        offsets.deliver(0, 5);
        offsets.deliver(0, 6);
        assert_eq!(offsets.settle(0, 5, generation), Ok(Some(6)));
        // The second copy of 6 settles late: nothing more to store.
        assert_eq!(offsets.settle(0, 6, generation), Ok(None));
        // A copy of a message before the stored offset is not held, and stores nothing.
        offsets.deliver(0, 4);
        assert_eq!(offsets.held(), 0);
        assert_eq!(offsets.settle(0, 4, generation), Ok(None));
    }

    #[test]
    fn a_message_of_a_revoked_partition_cannot_store() {
        let mut offsets = Offsets::default();
        let before = offsets.deliver(0, 5);
        offsets.deliver(0, 6);
        offsets.forget([0, 1]);
        assert_eq!(offsets.held(), 0);
        assert_eq!(offsets.settle(0, 5, before), Err(Revoked));
        // Assigned again, from the committed offset: a new generation.
        let after = offsets.deliver(0, 5);
        assert_ne!(after, before);
        assert_eq!(offsets.settle(0, 6, before), Err(Revoked));
        assert_eq!(offsets.settle(0, 5, after), Ok(Some(5)));
    }
}
