using System.Diagnostics.Metrics;

namespace PersistentServices.Client;

/// <summary>
/// The client package's own meter, <c>PersistentServices.Client</c> (the services' meter is <c>PersistentServices</c>; a
/// process that is both a client and a service has both), and its instruments: one set per host, created from its
/// <see cref="IMeterFactory"/> by the singleton <c>AddPersistentSessions</c> registers, as the services' meter is
/// (issue 33). Instruments are named <c>persistentservices.client.&lt;thing&gt;</c>; durations are in seconds. Every
/// instrument carries the named client as the tag <c>client</c>.
/// </summary>
internal sealed class ClientMetrics
{
    public const string MeterName = PersistentServicesTelemetry.ClientMeterName;

    public ClientMetrics(IMeterFactory meterFactory)
    {
        ArgumentNullException.ThrowIfNull(meterFactory);
        Meter = meterFactory.Create(new MeterOptions(MeterName) { Version = typeof(ClientMetrics).Assembly.GetName().Version?.ToString() });
        RequestsSent = Meter.CreateCounter<long>(
            "persistentservices.client.requests.sent", "{request}", "New requests stored and sent for the first time.");
        Retries = Meter.CreateCounter<long>(
            "persistentservices.client.retries", "{attempt}", "Attempts after the first of a request, with the same session and number (timeouts, dropped connections, 503, 429, a reply cut short), and resends by RecoverAsync.");
        RepliesStored = Meter.CreateCounter<long>(
            "persistentservices.client.replies.stored", "{reply}", "Replies made durable in the client store: a live call's with its handover mark, a resend's by RecoverAsync as a stored reply.");
        RepliesRecovered = Meter.CreateCounter<long>(
            "persistentservices.client.replies.recovered", "{reply}", "Replies RecoverAsync handed back to the application.");
        SessionsClosed = Meter.CreateCounter<long>(
            "persistentservices.client.sessions.closed", "{session}", "Idle sessions ended at the service when the client stopped.");
        NodeChanges = Meter.CreateCounter<long>(
            "persistentservices.client.replication.node_changes", "{change}", "Times a replication group's current node changed: an attempt was served by another node of the group than the one that served before (tag node: the one that serves now).");
        RequestDuration = Meter.CreateHistogram(
            "persistentservices.client.request.duration", "s", "Time from a call's start to its reply being handed over (storing, every attempt and the forces included).",
            tags: null, advice: Diagnostics.PersistentServicesMetrics.ShortDurations);
    }

    /// <summary>The client's meter (owned by the factory, which disposes it with the host).</summary>
    public Meter Meter { get; }

    public Counter<long> RequestsSent { get; }

    public Counter<long> Retries { get; }

    public Counter<long> RepliesStored { get; }

    public Counter<long> RepliesRecovered { get; }

    public Counter<long> SessionsClosed { get; }

    public Counter<long> NodeChanges { get; }

    public Histogram<double> RequestDuration { get; }

    public static KeyValuePair<string, object?> Tag(string client) => new("client", client);
}
