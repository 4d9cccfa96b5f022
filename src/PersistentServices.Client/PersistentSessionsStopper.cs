using Microsoft.Extensions.Hosting;

namespace PersistentServices.Client;

/// <summary>
/// Registered by <c>AddPersistentSessions</c>, one per named client: when the host stops, before it disposes the service
/// provider (and with it the client's handlers), the client's idle sessions are ended at their services
/// (<see cref="PersistentSessionClient.CloseIdleSessionsAsync"/>, bounded by <see cref="PersistentClientOptions.CloseSessionsTimeout"/>).
/// </summary>
internal sealed class PersistentSessionsStopper(PersistentSessionClient client) : IHostedService
{
    public Task StartAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StopAsync(CancellationToken cancellationToken) => client.CloseIdleSessionsAsync(cancellationToken);
}
