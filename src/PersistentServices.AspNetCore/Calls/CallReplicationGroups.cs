using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using PersistentServices.Diagnostics;
using PersistentServices.Replication;

namespace PersistentServices.Calls;

/// <summary>
/// The replication groups this service's calls follow (<see cref="PersistentCallOptions.ReplicationGroups"/>; docs/calls.md,
/// "Calling a replicated service"): one router per service, shared by every <c>AddPersistentCalls()</c> client, so all calls
/// to a group start at the node that last served any of them. Logs events 1381–1383 and counts
/// <c>persistentservices.calls.replication.node_changes</c>.
/// </summary>
internal sealed partial class CallReplicationGroups : IReplicationGroupEvents
{
    private readonly ILogger _logger;
    private readonly PersistentServicesMetrics _metrics;

    public CallReplicationGroups(IOptions<PersistentServicesOptions> options, PersistentServicesMetrics metrics, ILogger<CallReplicationGroups> logger)
    {
        _logger = logger;
        _metrics = metrics;
        Router = new ReplicationGroupRouter(options.Value.Calls.ReplicationGroups, this);
    }

    public ReplicationGroupRouter Router { get; }

    void IReplicationGroupEvents.PassedOver(string node, string group, string reason) => NodePassedOver(_logger, node, group, reason);

    void IReplicationGroupEvents.ServingChanged(string node, string group, string? previous)
    {
        NodeServing(_logger, node, group, previous ?? "none");
        _metrics.CallNodeChanges.Add(1, new KeyValuePair<string, object?>("node", node));
    }

    void IReplicationGroupEvents.NoneServed(string group, string reasons) => NoNodeServing(_logger, group, reasons);

    [LoggerMessage(1381, LogLevel.Debug, "A call's node {Node} of replication group ({Group}) did not serve ({Reason}): the next node of the group is tried")]
    private static partial void NodePassedOver(ILogger logger, string node, string group, string reason);

    [LoggerMessage(1382, LogLevel.Information, "Replication group ({Group}): calls now go to {Node} (before: {Previous}), the node that served")]
    private static partial void NodeServing(ILogger logger, string node, string group, string previous);

    [LoggerMessage(1383, LogLevel.Information, "No node of replication group ({Group}) served this attempt of a call ({Reasons}); the call is retried with the same id after the backoff")]
    private static partial void NoNodeServing(ILogger logger, string group, string reasons);
}

/// <summary>
/// The innermost handler of an <c>AddPersistentCalls()</c> client, inside the resilience pipeline and after the signature:
/// each attempt to an address of one of <see cref="PersistentCallOptions.ReplicationGroups"/> goes to its group's serving
/// node (<see cref="ReplicationGroupRouter"/>), the message unchanged but for its scheme, host and port. The signature
/// (<c>PS-Signature</c>) covers the method, path and query, not the host, so it holds at every node of the group.
/// </summary>
internal sealed class ReplicationGroupCallHandler(CallReplicationGroups groups) : DelegatingHandler
{
    protected override Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
        => groups.Router.SendAsync(request, (message, token) => base.SendAsync(message, token), cancellationToken);
}
