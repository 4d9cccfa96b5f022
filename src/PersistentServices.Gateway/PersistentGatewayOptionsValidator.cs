using System.Globalization;
using Microsoft.Extensions.Options;

namespace PersistentServices.Gateway;

/// <summary>Validates <see cref="PersistentGatewayOptions"/> at startup with messages that name the option.</summary>
internal sealed class PersistentGatewayOptionsValidator : IValidateOptions<PersistentGatewayOptions>
{
    public ValidateOptionsResult Validate(string? name, PersistentGatewayOptions options)
    {
        var failures = new List<string>();
        if (options.Services.Count == 0)
        {
            failures.Add("PersistentGateway:Services must name at least one service, each with its Instances (ordinal = base address).");
        }

        if (options.HoldTime <= TimeSpan.Zero || options.HoldTime > TimeSpan.FromHours(1))
        {
            failures.Add($"PersistentGateway:HoldTime must be positive and at most one hour (was {options.HoldTime}).");
        }

        if (options.RetryDelay <= TimeSpan.Zero || options.MaxRetryDelay < options.RetryDelay)
        {
            failures.Add($"PersistentGateway:RetryDelay must be positive and at most MaxRetryDelay (were {options.RetryDelay} and {options.MaxRetryDelay}).");
        }

        if (options.MaxRequestBodyBytes < 1)
        {
            failures.Add($"PersistentGateway:MaxRequestBodyBytes must be positive (was {options.MaxRequestBodyBytes}).");
        }

        if (options.MaxBufferedBytes < options.MaxRequestBodyBytes)
        {
            failures.Add($"PersistentGateway:MaxBufferedBytes must be at least MaxRequestBodyBytes ({options.MaxRequestBodyBytes}) (was {options.MaxBufferedBytes}).");
        }

        if (options.MaxBufferedBytesPerClient is { } perClient && (perClient < options.MaxRequestBodyBytes || perClient > options.MaxBufferedBytes))
        {
            failures.Add($"PersistentGateway:MaxBufferedBytesPerClient must be at least MaxRequestBodyBytes ({options.MaxRequestBodyBytes}) and at most MaxBufferedBytes ({options.MaxBufferedBytes}) (was {perClient}).");
        }

        if (options.PeerKey is { Length: < 32 } shortKey)
        {
            failures.Add($"PersistentGateway:PeerKey must have at least 32 characters (had {shortKey.Length}): the services' PersistentServicesOptions.Calls.PeerKey.");
        }
        else if (options.PeerKey is null && options.Services.Values.Any(s => s.Persistent))
        {
            failures.Add("PersistentGateway:PeerKey must be set (the services' PersistentServicesOptions.Calls.PeerKey) when a service is Persistent: the gateway signs " +
                "the Idempotency-Keys it generates with it, and without the signature a service counts them as one client's own keys, kept a day " +
                "(docs/gateway.md, \"Generated keys\").");
        }

        if (!(options.MinRequestBodyDataRate > 0))
        {
            failures.Add($"PersistentGateway:MinRequestBodyDataRate must be positive, in bytes per second (was {options.MinRequestBodyDataRate}).");
        }

        if (options.ConnectTimeout <= TimeSpan.Zero)
        {
            failures.Add($"PersistentGateway:ConnectTimeout must be positive (was {options.ConnectTimeout}).");
        }

        if (options.NodeResponseTimeout <= TimeSpan.Zero)
        {
            failures.Add($"PersistentGateway:NodeResponseTimeout must be positive (was {options.NodeResponseTimeout}).");
        }

        var prefixes = new Dictionary<string, string>(StringComparer.OrdinalIgnoreCase);
        foreach (var (serviceName, service) in options.Services)
        {
            var at = $"PersistentGateway:Services:{serviceName}";
            if (service.PathPrefix.Length > 0 && (!service.PathPrefix.StartsWith('/') || service.PathPrefix.EndsWith('/')))
            {
                failures.Add($"{at}:PathPrefix must start with '/' and not end with one, or be empty (was '{service.PathPrefix}').");
            }

            if (!prefixes.TryAdd(service.PathPrefix, serviceName))
            {
                failures.Add($"{at}:PathPrefix '{service.PathPrefix}' is also the prefix of service {prefixes[service.PathPrefix]}.");
            }

            if (!service.SessionsPath.StartsWith('/'))
            {
                failures.Add($"{at}:SessionsPath must start with '/' (was '{service.SessionsPath}').");
            }

            foreach (var plain in service.PlainPaths)
            {
                if (!plain.StartsWith('/'))
                {
                    failures.Add($"{at}:PlainPaths must start with '/' (was '{plain}').");
                }
            }

            if (service.Instances.Count == 0)
            {
                failures.Add($"{at}:Instances must list at least one instance (ordinal = base address).");
            }

            foreach (var draining in service.DrainingInstances)
            {
                if (!service.Instances.ContainsKey(draining))
                {
                    failures.Add($"{at}:DrainingInstances: '{draining}' is not one of the service's Instances.");
                }
            }

            if (service.Instances.Count > 0 && service.Instances.Keys.All(service.DrainingInstances.Contains))
            {
                failures.Add($"{at}:DrainingInstances lists every instance: new sessions would have nowhere to go.");
            }

            foreach (var (ordinal, address) in service.Instances)
            {
                if (!int.TryParse(ordinal, NumberStyles.None, CultureInfo.InvariantCulture, out var n) || n > 255)
                {
                    failures.Add($"{at}:Instances: '{ordinal}' is not an instance ordinal (0 to 255).");
                }

                // One address, or the nodes of the instance's replication group separated by commas (docs/gateway.md, "Replicas").
                foreach (var node in address.Split(',', StringSplitOptions.TrimEntries))
                {
                    if (!Uri.TryCreate(node, UriKind.Absolute, out var uri) || (uri.Scheme != Uri.UriSchemeHttp && uri.Scheme != Uri.UriSchemeHttps)
                        || uri.Query.Length > 0 || uri.Fragment.Length > 0)
                    {
                        failures.Add($"{at}:Instances:{ordinal} must be an absolute http or https address without query, or such addresses separated by commas (the nodes of a replication group) (was '{address}').");
                        break;
                    }
                }
            }
        }

        return failures.Count == 0 ? ValidateOptionsResult.Success : ValidateOptionsResult.Fail(failures);
    }
}
