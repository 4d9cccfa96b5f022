using System.Diagnostics.Metrics;

namespace PersistentServices.Client;

/// <summary>
/// The client package's own meter, <c>PersistentServices.Client</c> (the services' meter is <c>PersistentServices</c>; a
/// process that is both a client and a service has both). Instruments are named <c>persistentservices.client.&lt;thing&gt;</c>;
/// durations are in seconds. Every instrument carries the named client as the tag <c>client</c>.
/// </summary>
internal static class ClientMetrics
{
    public const string MeterName = Diagnostics.PersistentServicesTelemetry.ClientMeterName;

    public static readonly Meter Meter = new(MeterName, typeof(ClientMetrics).Assembly.GetName().Version?.ToString());

    public static readonly Counter<long> RequestsSent = Meter.CreateCounter<long>(
        "persistentservices.client.requests.sent", "{request}", "New requests stored and sent for the first time.");

    public static readonly Counter<long> Retries = Meter.CreateCounter<long>(
        "persistentservices.client.retries", "{attempt}", "Attempts after the first of a request, with the same session and number (timeouts, dropped connections, 503, 429, a reply cut short), and resends by RecoverAsync.");

    public static readonly Counter<long> RepliesStored = Meter.CreateCounter<long>(
        "persistentservices.client.replies.stored", "{reply}", "Replies made durable in the client store: a live call's with its handover mark, a resend's by RecoverAsync as a stored reply.");

    public static readonly Counter<long> RepliesRecovered = Meter.CreateCounter<long>(
        "persistentservices.client.replies.recovered", "{reply}", "Replies RecoverAsync handed back to the application.");

    public static readonly Counter<long> SessionsClosed = Meter.CreateCounter<long>(
        "persistentservices.client.sessions.closed", "{session}", "Idle sessions ended at the service when the client stopped.");

    public static readonly Histogram<double> RequestDuration = Meter.CreateHistogram(
        "persistentservices.client.request.duration", "s", "Time from a call's start to its reply being handed over (storing, every attempt and the forces included).",
        tags: null, advice: Diagnostics.PersistentServicesMetrics.ShortDurations);

    public static KeyValuePair<string, object?> Tag(string client) => new("client", client);
}
