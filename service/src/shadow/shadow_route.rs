//! `GET /shadow`: per partition, what each shadow would have done beside the live policies.

use crate::selection::selection_service::SelectionService;
use dynamo_kv_router::metrics::ShadowReport;
use serde::Serialize;

/// One partition's shadows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PartitionShadows {
    /// The partition's model.
    pub model_name: String,
    /// Its routing group.
    pub routing_group: String,
    /// Bookings its shadows never saw because the queue was full.
    pub cases_dropped: u64,
    /// Each shadow's figures, by role and name.
    pub shadows: Vec<ShadowView>,
}

/// A shadow's figures, with the rates worked out.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShadowView {
    /// The sums.
    #[serde(flatten)]
    pub report: ShadowReport,
    /// Share of bookings where it chose the live worker.
    pub agreement: f64,
    /// Share of prompt blocks the live choices found cached.
    pub live_hit_rate: f64,
    /// Share of prompt blocks its choices would have found cached.
    pub shadow_hit_rate: f64,
}

impl From<ShadowReport> for ShadowView {
    fn from(report: ShadowReport) -> Self {
        Self {
            agreement: report.agreement(),
            live_hit_rate: report.live_hit_rate(),
            shadow_hit_rate: report.shadow_hit_rate(),
            report,
        }
    }
}

impl SelectionService {
    /// `GET /shadow`: every partition's shadow figures, by partition key.
    pub fn shadow_reports(&self) -> Vec<PartitionShadows> {
        self.partitions()
            .iter()
            .map(|partition| PartitionShadows {
                model_name: partition.key.model_name.clone(),
                routing_group: partition.key.routing_group.clone(),
                cases_dropped: partition.router.shadow_cases_dropped(),
                shadows: partition
                    .router
                    .shadow_reports()
                    .into_iter()
                    .map(ShadowView::from)
                    .collect(),
            })
            .collect()
    }
}
