//! rtune's integration tests: one binary with a `main` of its own, because tests that start worker
//! processes re-execute this binary, and `rtune::init()` must run first to turn such a process
//! into a worker (libtest's generated `main` would not).

mod cli;
mod cluster;
mod collective_process;
mod command;
mod common;
mod data;
mod debugging;
mod docs;
mod elastic;
mod examples;
mod front;
mod front_door;
mod gpu;
#[path = "../shared/libtorch.rs"]
mod libtorch;
mod lightgbm;
mod monitoring;
mod mutations;
mod predict;
mod relay;
mod serve;
mod shared_nothing;
mod staging;
mod stale_writer;
mod storage;
mod tch_basics;
mod tracking;
mod trainer;
mod trees;
mod tune;

use libtest_mimic::{Arguments, Trial};

/// How long one test may take before the run counts as hung and ends (failed) at once, so that
/// a hang fails CI with the test's name instead of stalling it.
const HANG: std::time::Duration = std::time::Duration::from_secs(300);

fn test(name: &'static str, f: fn() -> anyhow::Result<()>) -> Trial {
    Trial::test(name, move || {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watched = done.clone();
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            while started.elapsed() < HANG {
                std::thread::sleep(std::time::Duration::from_millis(200));
                if watched.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
            }
            eprintln!("{name} still runs after {HANG:?}: it hangs; ending the test run");
            std::process::exit(101);
        });
        let result = f().map_err(|e| format!("{e:#}"));
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Err(message) = &result {
            FAILURES.lock().unwrap().push(format!("{name}: {}", short(message)));
        }
        result.map_err(Into::into)
    })
}

/// Each failure in a few lines, printed again after the whole run: a log that keeps only its
/// head and tail (as CI's summary does) still says why each test failed, even when one failure
/// carries a child's whole backtrace.
static FAILURES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// The first lines of `message`, and the last few further on that tell of an error (a child's
/// output comes whole in a message: its warnings, its error, then its backtrace), each cut to
/// 300 characters.
fn short(message: &str) -> String {
    let cut = |line: &str| match line.char_indices().nth(300) {
        Some((at, _)) => format!("{} [..]", &line[..at]),
        None => line.to_owned(),
    };
    let telling = |line: &&str| {
        let trimmed = line.trim_start();
        ["Error", "error:", "Caused by", "thread '"].iter().any(|w| trimmed.starts_with(w))
            || line.contains("panicked at")
            || line.contains("Z  WARN ")
            || line.contains("Z ERROR ")
    };
    let lines: Vec<&str> = message.lines().collect();
    let more: Vec<&str> = lines.iter().copied().skip(3).filter(telling).collect();
    let head = lines.iter().copied().take(3);
    let last = more[more.len().saturating_sub(4)..].iter().copied();
    head.chain(last).map(cut).collect::<Vec<_>>().join("\n    ")
}

fn main() {
    rtune::init();
    collective_process::run_child_if_asked();
    cluster::run_driver_if_asked();
    cluster::run_simulated_sweep_if_asked();
    tune::run_sweep_driver_if_asked();
    storage::run_fit_if_asked();
    elastic::run_fit_if_asked();
    elastic::run_give_way_if_asked();
    shared_nothing::run_driver_if_asked();
    // Heads and node agents keep the drivers' binaries (a few hundred MB each, a new one per
    // build) in their cache: the tests' go with the run instead of piling up in ~/.cache.
    let cache = tempfile::Builder::new().prefix("rtune-test-cache").tempdir().expect("a cache");
    // SAFETY: no other thread runs yet.
    unsafe { std::env::set_var("RTUNE_CACHE", cache.path()) };
    let args = Arguments::from_args();
    let tests = vec![
        test("tch_basics::mlp_loss_falls", tch_basics::mlp_loss_falls),
        test(
            "tch_basics::var_store_safetensors_round_trip",
            tch_basics::var_store_safetensors_round_trip,
        ),
        test("trainer::two_workers_converge_on_digits", trainer::two_workers_converge_on_digits),
        test(
            "trainer::rank_times_say_where_each_step_goes",
            trainer::rank_times_say_where_each_step_goes,
        ),
        test(
            "gpu::gpus_workers_cannot_use_are_refused_before_any_trial",
            gpu::gpus_workers_cannot_use_are_refused_before_any_trial,
        ),
        test(
            "gpu::a_cpu_only_libtorch_is_refused_by_name",
            gpu::a_cpu_only_libtorch_is_refused_by_name,
        ),
        test(
            "cluster::gpus_a_node_cannot_use_are_refused_with_its_name",
            cluster::gpus_a_node_cannot_use_are_refused_with_its_name,
        ),
        test(
            "gpu::a_trial_waiting_for_resources_is_pending",
            gpu::a_trial_waiting_for_resources_is_pending,
        ),
        test(
            "data::shards_partition_rows_and_batch_evenly_across_runs_and_resumes",
            data::shards_partition_rows_and_batch_evenly_across_runs_and_resumes,
        ),
        test(
            "data::a_sweep_prepares_its_datasets_once_and_a_param_picks_one",
            data::a_sweep_prepares_its_datasets_once_and_a_param_picks_one,
        ),
        test(
            "data::preprocessor_fits_on_train_and_travels_with_the_checkpoint",
            data::preprocessor_fits_on_train_and_travels_with_the_checkpoint,
        ),
        test(
            "trainer::two_half_batches_equal_one_full_batch",
            trainer::two_half_batches_equal_one_full_batch,
        ),
        test(
            "trainer::sharded_training_equals_data_parallel_training",
            trainer::sharded_training_equals_data_parallel_training,
        ),
        test("trainer::sharded_training_equals_pytorch", trainer::sharded_training_equals_pytorch),
        test(
            "trainer::optimizer_checkpoints_resume_and_reshard",
            trainer::optimizer_checkpoints_resume_and_reshard,
        ),
        test(
            "trainer::sigkilled_worker_resumes_from_checkpoint",
            trainer::sigkilled_worker_resumes_from_checkpoint,
        ),
        test(
            "trainer::concurrent_fits_share_the_machine",
            trainer::concurrent_fits_share_the_machine,
        ),
        test(
            "trainer::unrecorded_checkpoints_go_when_the_run_fails",
            trainer::unrecorded_checkpoints_go_when_the_run_fails,
        ),
        test(
            "elastic::a_lost_rank_shrinks_the_group_and_it_grows_back",
            elastic::a_lost_rank_shrinks_the_group_and_it_grows_back,
        ),
        test(
            "elastic::a_resumed_elastic_trial_starts_as_large_as_a_fresh_one",
            elastic::a_resumed_elastic_trial_starts_as_large_as_a_fresh_one,
        ),
        test(
            "elastic::a_rank_lost_mid_step_is_survived_in_place",
            elastic::a_rank_lost_mid_step_is_survived_in_place,
        ),
        test(
            "elastic::a_lost_rank_0_goes_on_under_checkpoint_names_of_its_own",
            elastic::a_lost_rank_0_goes_on_under_checkpoint_names_of_its_own,
        ),
        test(
            "elastic::a_sharded_group_goes_back_to_its_checkpoint",
            elastic::a_sharded_group_goes_back_to_its_checkpoint,
        ),
        test(
            "elastic::a_grown_group_gives_way_to_a_waiting_run",
            elastic::a_grown_group_gives_way_to_a_waiting_run,
        ),
        test(
            "elastic::losing_a_rank_below_min_fails_the_trial",
            elastic::losing_a_rank_below_min_fails_the_trial,
        ),
        test(
            "debugging::the_demo_sweep_runs_in_local_mode",
            debugging::the_demo_sweep_runs_in_local_mode,
        ),
        test(
            "debugging::rtune_stack_shows_where_each_rank_is",
            debugging::rtune_stack_shows_where_each_rank_is,
        ),
        test(
            "debugging::a_panic_in_local_mode_fails_the_trial_not_the_sweep",
            debugging::a_panic_in_local_mode_fails_the_trial_not_the_sweep,
        ),
        test(
            "trainer::local_mode_runs_the_train_function_in_this_process",
            trainer::local_mode_runs_the_train_function_in_this_process,
        ),
        test(
            "trainer::panicking_worker_fails_the_run_with_rank_and_message",
            trainer::panicking_worker_fails_the_run_with_rank_and_message,
        ),
        test(
            "trainer::the_failing_rank_is_named_not_the_peer_that_lost_it",
            trainer::the_failing_rank_is_named_not_the_peer_that_lost_it,
        ),
        test(
            "trainer::metric_that_is_not_a_number_is_named",
            trainer::metric_that_is_not_a_number_is_named,
        ),
        test(
            "trainer::config_mistakes_fail_before_start",
            trainer::config_mistakes_fail_before_start,
        ),
        test(
            "trainer::stop_criterion_ends_the_run_cleanly",
            trainer::stop_criterion_ends_the_run_cleanly,
        ),
        test(
            "trainer::a_burst_of_reports_is_written_while_the_run_waits",
            trainer::a_burst_of_reports_is_written_while_the_run_waits,
        ),
        test("collective_process::killed_peer_is_lost", collective_process::killed_peer_is_lost),
        test(
            "collective_process::frozen_peer_times_out",
            collective_process::frozen_peer_times_out,
        ),
        test(
            "cluster::node_loss_kills_survivors_and_the_retry_waits_for_capacity",
            cluster::node_loss_kills_survivors_and_the_retry_waits_for_capacity,
        ),
        test(
            "cluster::dead_driver_frees_its_placement_group",
            cluster::dead_driver_frees_its_placement_group,
        ),
        test(
            "cluster::bad_cli_numbers_are_named_not_panics",
            cluster::bad_cli_numbers_are_named_not_panics,
        ),
        test(
            "tune::asha_stops_poor_trials_and_the_best_checkpoint_loads",
            tune::asha_stops_poor_trials_and_the_best_checkpoint_loads,
        ),
        test("tune::tuner_mistakes_are_named", tune::tuner_mistakes_are_named),
        test("tune::a_param_never_read_is_named", tune::a_param_never_read_is_named),
        test("tune::trials_never_run_beyond_the_pool", tune::trials_never_run_beyond_the_pool),
        test("tune::killed_driver_is_restored_exactly", tune::killed_driver_is_restored_exactly),
        test(
            "tune::callbacks_hear_every_trial_and_tensorboard_reads_the_logs",
            tune::callbacks_hear_every_trial_and_tensorboard_reads_the_logs,
        ),
        test(
            "tune::warm_workers_share_nothing_between_trials",
            tune::warm_workers_share_nothing_between_trials,
        ),
        test(
            "tune::pbt_exploits_continue_from_the_source_weights",
            tune::pbt_exploits_continue_from_the_source_weights,
        ),
        test(
            "tune::pbt_time_shares_two_slots_among_eight_trials",
            tune::pbt_time_shares_two_slots_among_eight_trials,
        ),
        test(
            "tune::a_trial_paused_and_resumed_at_once_ends_once",
            tune::a_trial_paused_and_resumed_at_once_ends_once,
        ),
        test(
            "tune::hyperband_pauses_and_resumes_trials_from_their_checkpoints",
            tune::hyperband_pauses_and_resumes_trials_from_their_checkpoints,
        ),
        test(
            "tune::a_trial_stopped_by_the_user_ends_and_the_sweep_goes_on",
            tune::a_trial_stopped_by_the_user_ends_and_the_sweep_goes_on,
        ),
        test(
            "tune::the_saved_state_keeps_up_with_reports",
            tune::the_saved_state_keeps_up_with_reports,
        ),
        test(
            "tune::a_held_trial_waits_and_goes_on_from_its_checkpoint",
            tune::a_held_trial_waits_and_goes_on_from_its_checkpoint,
        ),
        test(
            "tune::bohb_with_hyperband_sweeps_and_saves_its_model",
            tune::bohb_with_hyperband_sweeps_and_saves_its_model,
        ),
        test(
            "tune::nsga2_sweeps_two_objectives_and_saves_its_generations",
            tune::nsga2_sweeps_two_objectives_and_saves_its_generations,
        ),
        test("tune::cmaes_sweeps_and_saves_its_search", tune::cmaes_sweeps_and_saves_its_search),
        test("tune::gp_sweeps_and_saves_its_search", tune::gp_sweeps_and_saves_its_search),
        test(
            "tune::an_attempt_failing_while_the_sweep_stops_is_no_failure",
            tune::an_attempt_failing_while_the_sweep_stops_is_no_failure,
        ),
        test("cli::run_show_ls_and_json", cli::run_show_ls_and_json),
        test(
            "docs::sweep_files_and_commands_in_the_docs_work",
            docs::sweep_files_and_commands_in_the_docs_work,
        ),
        test("docs::the_docs_checks_refuse_mistakes", docs::the_docs_checks_refuse_mistakes),
        test("front_door::a_second_driver_is_refused", front_door::a_second_driver_is_refused),
        test(
            "front_door::a_dead_drivers_lease_is_taken_over",
            front_door::a_dead_drivers_lease_is_taken_over,
        ),
        test(
            "front_door::ctrl_c_shows_interrupted_trials",
            front_door::ctrl_c_shows_interrupted_trials,
        ),
        test(
            "front_door::other_tools_domains_are_refused_with_rtunes_spelling",
            front_door::other_tools_domains_are_refused_with_rtunes_spelling,
        ),
        test(
            "front_door::validate_prints_the_plan_and_builtins_list_the_trainables",
            front_door::validate_prints_the_plan_and_builtins_list_the_trainables,
        ),
        test(
            "front_door::grid_sweeps_are_counted_as_ray_counts_them",
            front_door::grid_sweeps_are_counted_as_ray_counts_them,
        ),
        test(
            "front_door::auto_picks_the_searcher_and_says_why",
            front_door::auto_picks_the_searcher_and_says_why,
        ),
        test(
            "front_door::all_mistakes_come_in_one_report",
            front_door::all_mistakes_come_in_one_report,
        ),
        test(
            "front_door::mistakes_behind_others_come_too",
            front_door::mistakes_behind_others_come_too,
        ),
        test(
            "front_door::a_refusal_is_all_that_is_printed",
            front_door::a_refusal_is_all_that_is_printed,
        ),
        test(
            "front_door::resume_with_a_differing_file_names_the_keys",
            front_door::resume_with_a_differing_file_names_the_keys,
        ),
        test(
            "front_door::a_trial_that_never_reports_counts_as_failed",
            front_door::a_trial_that_never_reports_counts_as_failed,
        ),
        test(
            "front_door::a_metric_no_trial_reports_is_the_sweeps_mistake",
            front_door::a_metric_no_trial_reports_is_the_sweeps_mistake,
        ),
        test("front_door::a_failing_trial_is_said_once", front_door::a_failing_trial_is_said_once),
        test(
            "front_door::export_of_a_sweep_without_results_says_so",
            front_door::export_of_a_sweep_without_results_says_so,
        ),
        test("front_door::a_closed_pipe_ends_quietly", front_door::a_closed_pipe_ends_quietly),
        test(
            "front_door::every_example_sweep_writes_to_rtune_results",
            front_door::every_example_sweep_writes_to_rtune_results,
        ),
        test(
            "front_door::a_sweep_file_switches_tensorboard_on",
            front_door::a_sweep_file_switches_tensorboard_on,
        ),
        test(
            "front::what_trains_nothing_loads_no_libtorch",
            front::what_trains_nothing_loads_no_libtorch,
        ),
        test(
            "front::other_commands_run_in_the_full_program",
            front::other_commands_run_in_the_full_program,
        ),
        test(
            "front::a_full_program_from_other_sources_is_refused",
            front::a_full_program_from_other_sources_is_refused,
        ),
        test(
            "predict::predictions_across_workers_match_one_process",
            predict::predictions_across_workers_match_one_process,
        ),
        test(
            "serve::triton_clients_get_what_rtune_predict_gives_and_bad_input_is_named",
            serve::triton_clients_get_what_rtune_predict_gives_and_bad_input_is_named,
        ),
        test(
            "serve::off_loopback_every_request_needs_the_token",
            serve::off_loopback_every_request_needs_the_token,
        ),
        test(
            "serve::tree_models_are_served_as_rtune_predict_predicts",
            serve::tree_models_are_served_as_rtune_predict_predicts,
        ),
        test(
            "serve::concurrent_clients_are_batched_and_every_answer_is_right",
            serve::concurrent_clients_are_batched_and_every_answer_is_right,
        ),
        test(
            "serve::a_killed_replica_comes_back_and_every_request_is_answered",
            serve::a_killed_replica_comes_back_and_every_request_is_answered,
        ),
        test(
            "serve::replicas_serve_from_the_cluster_nodes",
            serve::replicas_serve_from_the_cluster_nodes,
        ),
        test(
            "serve::overload_is_refused_at_once_and_sigterm_answers_what_is_in_flight",
            serve::overload_is_refused_at_once_and_sigterm_answers_what_is_in_flight,
        ),
        test(
            "cluster::batch_prediction_runs_on_the_cluster",
            cluster::batch_prediction_runs_on_the_cluster,
        ),
        test("cli::exit_codes_follow_the_table", cli::exit_codes_follow_the_table),
        test(
            "monitoring::prometheus_scrapes_a_running_sweep",
            monitoring::prometheus_scrapes_a_running_sweep,
        ),
        test(
            "monitoring::the_endpoint_off_loopback_needs_the_token",
            monitoring::the_endpoint_off_loopback_needs_the_token,
        ),
        test(
            "monitoring::the_head_serves_its_pool_to_prometheus",
            monitoring::the_head_serves_its_pool_to_prometheus,
        ),
        test(
            "monitoring::a_slow_rank_is_marked_a_straggler",
            monitoring::a_slow_rank_is_marked_a_straggler,
        ),
        test(
            "tracking::optuna_reads_the_sweep_as_a_study",
            tracking::optuna_reads_the_sweep_as_a_study,
        ),
        test(
            "tracking::a_resumed_sweep_goes_on_with_its_study",
            tracking::a_resumed_sweep_goes_on_with_its_study,
        ),
        test(
            "tracking::bad_optuna_journals_are_refused",
            tracking::bad_optuna_journals_are_refused,
        ),
        test(
            "tracking::optuna_dashboard_shows_the_sweep",
            tracking::optuna_dashboard_shows_the_sweep,
        ),
        test("tracking::mlflow_reads_the_sweep_as_runs", tracking::mlflow_reads_the_sweep_as_runs),
        test(
            "tracking::an_interrupted_sweep_is_killed_then_goes_on",
            tracking::an_interrupted_sweep_is_killed_then_goes_on,
        ),
        test(
            "tracking::a_tracking_server_down_for_a_while_loses_nothing",
            tracking::a_tracking_server_down_for_a_while_loses_nothing,
        ),
        test(
            "tracking::bad_mlflow_settings_are_refused",
            tracking::bad_mlflow_settings_are_refused,
        ),
        test(
            "storage::a_sweep_on_s3_is_read_back_from_the_store",
            storage::a_sweep_on_s3_is_read_back_from_the_store,
        ),
        test(
            "storage::a_killed_sweep_resumes_from_the_store_alone",
            storage::a_killed_sweep_resumes_from_the_store_alone,
        ),
        test(
            "storage::async_uploads_record_checkpoints_once_they_are_in_the_store",
            storage::async_uploads_record_checkpoints_once_they_are_in_the_store,
        ),
        test(
            "storage::a_large_checkpoint_goes_up_in_parts_and_comes_back_whole",
            storage::a_large_checkpoint_goes_up_in_parts_and_comes_back_whole,
        ),
        test("storage::pbt_exploits_on_the_store", storage::pbt_exploits_on_the_store),
        test(
            "staging::resumes_and_exports_fetch_only_the_checkpoints_they_read",
            staging::resumes_and_exports_fetch_only_the_checkpoints_they_read,
        ),
        test("staging::names_are_decided_by_the_store", staging::names_are_decided_by_the_store),
        test(
            "stale_writer::a_dead_attempts_late_upload_replaces_no_recorded_checkpoint",
            stale_writer::a_dead_attempts_late_upload_replaces_no_recorded_checkpoint,
        ),
        test(
            "stale_writer::a_failed_file_leaves_no_parts_of_its_siblings",
            stale_writer::a_failed_file_leaves_no_parts_of_its_siblings,
        ),
        test(
            "storage::the_store_lease_refuses_a_second_driver_and_yields_to_a_dead_one",
            storage::the_store_lease_refuses_a_second_driver_and_yields_to_a_dead_one,
        ),
        test("storage::a_single_fit_goes_to_the_store", storage::a_single_fit_goes_to_the_store),
        test(
            "storage::a_model_exported_to_the_store_predicts_from_there",
            storage::a_model_exported_to_the_store_predicts_from_there,
        ),
        test(
            "storage::a_store_down_mid_upload_is_retried_then_fails_the_attempt",
            storage::a_store_down_mid_upload_is_retried_then_fails_the_attempt,
        ),
        test(
            "shared_nothing::a_cluster_that_shares_only_the_store",
            shared_nothing::a_cluster_that_shares_only_the_store,
        ),
        test(
            "storage::bad_store_urls_are_refused_before_anything_runs",
            storage::bad_store_urls_are_refused_before_anything_runs,
        ),
        test(
            "cli::a_sharded_sweep_under_pbt_carries_the_optimizer_state",
            cli::a_sharded_sweep_under_pbt_carries_the_optimizer_state,
        ),
        test("cli::resume_takes_a_corrected_sweep_file", cli::resume_takes_a_corrected_sweep_file),
        test(
            "cli::the_synthetic_example_keeps_its_promise",
            cli::the_synthetic_example_keeps_its_promise,
        ),
        test("cli::rtune_stop_leaves_a_resumable_sweep", cli::rtune_stop_leaves_a_resumable_sweep),
        test("cli::shell_completions_complete_commands", cli::shell_completions_complete_commands),
        test(
            "mutations::mutated_sweep_files_are_refused_before_anything_runs",
            mutations::mutated_sweep_files_are_refused_before_anything_runs,
        ),
        test(
            "cli::a_sweep_that_recorded_nothing_is_replaced",
            cli::a_sweep_that_recorded_nothing_is_replaced,
        ),
        test("cli::ctrl_c_leaves_a_resumable_sweep", cli::ctrl_c_leaves_a_resumable_sweep),
        test(
            "cli::second_ctrl_c_stops_at_once_and_loses_nothing",
            cli::second_ctrl_c_stops_at_once_and_loses_nothing,
        ),
        test("cli::failed_trials_exit_1_unless_allowed", cli::failed_trials_exit_1_unless_allowed),
        test("cli::sweep_file_mistakes_are_named", cli::sweep_file_mistakes_are_named),
        test("cli::tui_in_a_real_terminal", cli::tui_in_a_real_terminal),
        test(
            "cli::tui_marks_a_straggler_in_a_real_terminal",
            cli::tui_marks_a_straggler_in_a_real_terminal,
        ),
        test(
            "cli::tui_at_80x24_keeps_the_chart_and_the_cutoffs",
            cli::tui_at_80x24_keeps_the_chart_and_the_cutoffs,
        ),
        test(
            "cli::known_points_run_first_and_brackets_are_shown",
            cli::known_points_run_first_and_brackets_are_shown,
        ),
        test("cli::quickstart_example_runs", cli::quickstart_example_runs),
        test(
            "examples::tpe_vs_random_prints_both_curves",
            examples::tpe_vs_random_prints_both_curves,
        ),
        test(
            "examples::pbt_exploits_and_every_trial_terminates",
            examples::pbt_exploits_and_every_trial_terminates,
        ),
        test(
            "examples::command_trainable_sweeps_the_ddp_script",
            examples::command_trainable_sweeps_the_ddp_script,
        ),
        test(
            "examples::cluster_sweep_runs_on_both_node_agents",
            examples::cluster_sweep_runs_on_both_node_agents,
        ),
        test(
            "cli::a_driver_in_the_background_prints_progress_lines",
            cli::a_driver_in_the_background_prints_progress_lines,
        ),
        test(
            "examples::own_crate_starts_without_ld_library_path",
            examples::own_crate_starts_without_ld_library_path,
        ),
        test(
            "cli::a_multi_objective_sweep_gives_its_pareto_front",
            cli::a_multi_objective_sweep_gives_its_pareto_front,
        ),
        test(
            "cli::demo_sweep_exports_a_model_that_predicts_the_test_set",
            cli::demo_sweep_exports_a_model_that_predicts_the_test_set,
        ),
        test(
            "cli::watch_follows_a_live_sweep_and_steers_it",
            cli::watch_follows_a_live_sweep_and_steers_it,
        ),
        test(
            "command::command_trainable_speaks_the_protocol_and_stops_cleanly",
            command::command_trainable_speaks_the_protocol_and_stops_cleanly,
        ),
        test(
            "command::a_sweep_stopped_on_a_mistake_cuts_its_trials_short",
            command::a_sweep_stopped_on_a_mistake_cuts_its_trials_short,
        ),
        test(
            "command::failed_command_resumes_from_its_checkpoint",
            command::failed_command_resumes_from_its_checkpoint,
        ),
        test("command::command_mistakes_are_named", command::command_mistakes_are_named),
        test(
            "command::elastic_command_restarts_with_the_new_world_size",
            command::elastic_command_restarts_with_the_new_world_size,
        ),
        test("command::ddp_script_sweeps_with_asha", command::ddp_script_sweeps_with_asha),
        test(
            "command::constraints_choose_among_feasible_trials",
            command::constraints_choose_among_feasible_trials,
        ),
        test(
            "trees::one_rank_trains_what_xgboost_trains",
            trees::one_rank_trains_what_xgboost_trains,
        ),
        test(
            "trees::two_ranks_train_what_xgboosts_own_distributed_run_trains",
            trees::two_ranks_train_what_xgboosts_own_distributed_run_trains,
        ),
        test(
            "trees::asha_stops_xgboost_trials_at_rounds_and_the_export_predicts_in_python",
            trees::asha_stops_xgboost_trials_at_rounds_and_the_export_predicts_in_python,
        ),
        test(
            "trees::a_killed_rank_goes_on_from_the_latest_checkpoint",
            trees::a_killed_rank_goes_on_from_the_latest_checkpoint,
        ),
        test(
            "trees::tree_mistakes_are_refused_before_anything_runs",
            trees::tree_mistakes_are_refused_before_anything_runs,
        ),
        test(
            "lightgbm::one_rank_trains_what_lightgbm_trains",
            lightgbm::one_rank_trains_what_lightgbm_trains,
        ),
        test(
            "lightgbm::two_ranks_train_what_lightgbms_own_distributed_run_trains",
            lightgbm::two_ranks_train_what_lightgbms_own_distributed_run_trains,
        ),
        test(
            "lightgbm::a_resumed_lightgbm_trial_boosts_on_to_the_uninterrupted_trees",
            lightgbm::a_resumed_lightgbm_trial_boosts_on_to_the_uninterrupted_trees,
        ),
        test(
            "lightgbm::asha_stops_lightgbm_trials_and_the_export_predicts_in_python",
            lightgbm::asha_stops_lightgbm_trials_and_the_export_predicts_in_python,
        ),
        test(
            "lightgbm::lightgbm_mistakes_are_refused_before_anything_runs",
            lightgbm::lightgbm_mistakes_are_refused_before_anything_runs,
        ),
        test(
            "lightgbm::lightgbm_early_stopping_ends_where_lightgbm_does",
            lightgbm::lightgbm_early_stopping_ends_where_lightgbm_does,
        ),
        test(
            "trees::xgboost_early_stopping_ends_where_xgboost_does",
            trees::xgboost_early_stopping_ends_where_xgboost_does,
        ),
        test(
            "trees::a_train_function_of_its_own_boosts_with_its_own_objective",
            trees::a_train_function_of_its_own_boosts_with_its_own_objective,
        ),
        test(
            "trees::a_custom_objective_of_the_wrong_length_is_refused",
            trees::a_custom_objective_of_the_wrong_length_is_refused,
        ),
        test(
            "trees::pbt_tree_trials_boost_on_from_the_checkpoint_they_take_over",
            trees::pbt_tree_trials_boost_on_from_the_checkpoint_they_take_over,
        ),
        test(
            "lightgbm::a_train_function_of_its_own_boosts_with_its_own_objective",
            lightgbm::a_train_function_of_its_own_boosts_with_its_own_objective,
        ),
        test(
            "trees::a_killed_lightgbm_rank_goes_on_from_the_latest_checkpoint",
            trees::a_killed_lightgbm_rank_goes_on_from_the_latest_checkpoint,
        ),
        test("cluster::status_json_matches_the_pool", cluster::status_json_matches_the_pool),
        test("cluster::wrong_token_is_refused", cluster::wrong_token_is_refused),
        test(
            "cluster::nodes_reconnect_to_a_restarted_head",
            cluster::nodes_reconnect_to_a_restarted_head,
        ),
        test(
            "cluster::a_simulated_cluster_of_20_nodes_runs_200_trials",
            cluster::a_simulated_cluster_of_20_nodes_runs_200_trials,
        ),
        test(
            "cluster::strict_spread_puts_one_worker_on_each_node",
            cluster::strict_spread_puts_one_worker_on_each_node,
        ),
        test(
            "cluster::killed_node_agent_fails_over_to_the_other_node",
            cluster::killed_node_agent_fails_over_to_the_other_node,
        ),
        test(
            "cluster::a_lost_node_shrinks_an_elastic_group_in_place_and_it_grows_back",
            cluster::a_lost_node_shrinks_an_elastic_group_in_place_and_it_grows_back,
        ),
    ];
    let conclusion = libtest_mimic::run(&args, tests);
    let failures = FAILURES.lock().unwrap();
    if !failures.is_empty() {
        eprintln!("\nthe failures in short:");
        for failure in failures.iter() {
            eprintln!("  {failure}");
        }
    }
    drop(cache);
    conclusion.exit();
}
