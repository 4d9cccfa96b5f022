using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.AspNetCore.Hosting.Server.Features;
using Microsoft.AspNetCore.Http.Features;

namespace PersistentServices.Testing;

/// <summary>
/// The server of a service under replay check: it binds no port and accepts nothing, so a check can run next to the
/// service it checks (same host, same configured port) and no client ever reaches a service recovering a copy.
/// Addresses the application adds (<c>app.Urls</c>, <c>app.Run(url)</c>) are accepted and ignored.
/// </summary>
internal sealed class ReplayCheckServer : IServer
{
    public ReplayCheckServer() => Features.Set<IServerAddressesFeature>(new ServerAddressesFeature());

    public IFeatureCollection Features { get; } = new FeatureCollection();

    public Task StartAsync<TContext>(IHttpApplication<TContext> application, CancellationToken cancellationToken)
        where TContext : notnull
    {
        // Nothing listens: the host would otherwise log the configured addresses as "Now listening on".
        Features.Get<IServerAddressesFeature>()?.Addresses.Clear();
        return Task.CompletedTask;
    }

    public Task StopAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public void Dispose()
    {
    }
}
