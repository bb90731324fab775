//! Group commit's bookkeeping, the same for both backends: copies of one event in a batch
//! are written once, and every copy gets that row's answer.

use std::collections::HashMap;

use super::{InsertOutcome, NewEvent};

/// The first occurrence of each (source, provider event id), and for every event the
/// position of its first occurrence in that list.
pub(super) fn dedupe(events: &[NewEvent<'_>]) -> (Vec<usize>, Vec<usize>) {
    let mut first: HashMap<(&str, &str), usize> = HashMap::with_capacity(events.len());
    let mut uniques = Vec::with_capacity(events.len());
    let mut slot = Vec::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        let key = (e.source.as_str(), e.provider_event_id.as_str());
        let u = *first.entry(key).or_insert_with(|| {
            uniques.push(i);
            uniques.len() - 1
        });
        slot.push(u);
    }
    (uniques, slot)
}

/// Every event's answer: the unique row's outcome for the first copy, and `Duplicate` of the
/// same id for later copies in the batch.
pub(super) fn answers(
    uniques: &[usize],
    slot: &[usize],
    outcomes: &[InsertOutcome],
) -> Vec<InsertOutcome> {
    slot.iter()
        .enumerate()
        .map(|(i, &u)| match outcomes[u] {
            InsertOutcome::Created(id) if uniques[u] == i => InsertOutcome::Created(id),
            InsertOutcome::Created(id) | InsertOutcome::Duplicate(id) => {
                InsertOutcome::Duplicate(id)
            }
        })
        .collect()
}
