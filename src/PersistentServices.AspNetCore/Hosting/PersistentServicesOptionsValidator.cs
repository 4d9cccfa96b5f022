using Microsoft.Extensions.Options;

namespace PersistentServices.Hosting;

/// <summary>Validates <see cref="PersistentServicesOptions"/> at startup with messages that name the option.</summary>
internal sealed class PersistentServicesOptionsValidator : IValidateOptions<PersistentServicesOptions>
{
    public ValidateOptionsResult Validate(string? name, PersistentServicesOptions options)
    {
        var failures = new List<string>();
        if (string.IsNullOrWhiteSpace(options.LogDirectory))
        {
            failures.Add("PersistentServicesOptions.LogDirectory is required: the directory of the service's log (on a persistent volume).");
        }

        if (options.MaxRequestBodyBytes < 1)
        {
            failures.Add($"PersistentServicesOptions.MaxRequestBodyBytes must be positive (was {options.MaxRequestBodyBytes}).");
        }

        if (options.MaxLoggedHeaderBytes < 1024)
        {
            failures.Add($"PersistentServicesOptions.MaxLoggedHeaderBytes must be at least 1024 (was {options.MaxLoggedHeaderBytes}).");
        }

        if (options.SessionIdleRetention < TimeSpan.FromSeconds(1))
        {
            failures.Add($"PersistentServicesOptions.SessionIdleRetention must be at least one second (was {options.SessionIdleRetention}).");
        }

        failures.AddRange(options.IdempotencyKeys.Validate());
        failures.AddRange(options.Replication.Validate(options));
        if (options.InstanceOrdinal is < 0 or > 255)
        {
            failures.Add($"PersistentServicesOptions.InstanceOrdinal must be between 0 and 255, or null for a service of one instance (was {options.InstanceOrdinal}).");
        }

        if (options.MaxSessions < 1)
        {
            failures.Add($"PersistentServicesOptions.MaxSessions must be positive (was {options.MaxSessions}).");
        }

        if (options.UnusedSessionRetention < TimeSpan.FromSeconds(1) || options.UnusedSessionRetention > options.SessionIdleRetention)
        {
            failures.Add($"PersistentServicesOptions.UnusedSessionRetention must be at least one second and at most SessionIdleRetention ({options.SessionIdleRetention}) (was {options.UnusedSessionRetention}).");
        }

        if (options.MaxSessionsPerOwner is < 1)
        {
            failures.Add($"PersistentServicesOptions.MaxSessionsPerOwner must be positive, or null for a tenth of MaxSessions (was {options.MaxSessionsPerOwner}).");
        }

        if (options.MaxSessionsPerAddress is < 1)
        {
            failures.Add($"PersistentServicesOptions.MaxSessionsPerAddress must be positive, or null for a tenth of MaxSessions, at least 100, at most half of it (was {options.MaxSessionsPerAddress}).");
        }

        var available = GC.GetGCMemoryInfo().TotalAvailableMemoryBytes;
        if (options.SessionMemoryBudgetBytes is { } budget && (budget < 1 << 20 || budget > available))
        {
            failures.Add($"PersistentServicesOptions.SessionMemoryBudgetBytes must be at least 1 MiB and at most the memory the process may use ({available} bytes); was {budget}. Leave it null for an eighth of that memory.");
        }

        var maxHeld = ((long)options.MaxRequestBodyBytes + options.MaxLoggedHeaderBytes) / 2;
        if (options.MaxBufferedReplyBytes < 0 || options.MaxBufferedReplyBytes > maxHeld)
        {
            failures.Add($"PersistentServicesOptions.MaxBufferedReplyBytes must be between 0 and half of MaxRequestBodyBytes + MaxLoggedHeaderBytes ({maxHeld}): a reply held in memory is copied into session checkpoints (was {options.MaxBufferedReplyBytes}).");
        }

        if (!options.SessionsPath.StartsWith('/') || options.SessionsPath.EndsWith('/'))
        {
            failures.Add($"PersistentServicesOptions.SessionsPath must start with '/' and not end with one (was '{options.SessionsPath}').");
        }

        if (options.SharedCheckpointInterval < 1)
        {
            failures.Add($"PersistentServicesOptions.SharedCheckpointInterval must be positive (was {options.SharedCheckpointInterval}).");
        }

        if (string.IsNullOrWhiteSpace(options.ServiceName))
        {
            failures.Add("PersistentServicesOptions.ServiceName must not be empty (it names this service in dependency vectors).");
        }

        if (options.SessionCheckpointBytes < 1024)
        {
            failures.Add($"PersistentServicesOptions.SessionCheckpointBytes must be at least 1024 (was {options.SessionCheckpointBytes}).");
        }

        if (options.ServiceCheckpointInterval < TimeSpan.FromSeconds(1))
        {
            failures.Add($"PersistentServicesOptions.ServiceCheckpointInterval must be at least one second (was {options.ServiceCheckpointInterval}).");
        }

        if (options.ServiceCheckpointLogBytes < 1 << 20)
        {
            failures.Add($"PersistentServicesOptions.ServiceCheckpointLogBytes must be at least 1 MiB (was {options.ServiceCheckpointLogBytes}).");
        }

        if (options.IdleCheckpointAfter < 1)
        {
            failures.Add($"PersistentServicesOptions.IdleCheckpointAfter must be positive (was {options.IdleCheckpointAfter}).");
        }

        if (!Enum.IsDefined(options.OnDivergence))
        {
            failures.Add($"PersistentServicesOptions.OnDivergence must be QuarantineSession or FailStop (was {options.OnDivergence}).");
        }

        if (options.Calls.PeerKey is { } key && key.Length < 32)
        {
            failures.Add($"PersistentServicesOptions.Calls.PeerKey must have at least 32 characters (had {key.Length}); it signs calls between the deployment's services.");
        }

        // Keys accepted besides PeerKey during a rotation (docs/calls.md): as strong as PeerKey, and only beside one.
        for (var i = 0; i < options.Calls.AcceptedPeerKeys.Count; i++)
        {
            if (options.Calls.AcceptedPeerKeys[i] is not { Length: >= 32 })
            {
                failures.Add($"PersistentServicesOptions.Calls.AcceptedPeerKeys[{i}] must have at least 32 characters (had {options.Calls.AcceptedPeerKeys[i]?.Length ?? 0}); " +
                    "a signature made with it is accepted like one made with PeerKey.");
            }
        }

        if (options.Calls.AcceptedPeerKeys.Count > 0 && options.Calls.PeerKey is null)
        {
            failures.Add("PersistentServicesOptions.Calls.AcceptedPeerKeys needs PeerKey: a service signs with PeerKey and accepts AcceptedPeerKeys besides it (a rotation, docs/calls.md).");
        }

        if (options.Calls.SignatureFutureSkew < TimeSpan.Zero || options.Calls.SignatureFutureSkew > TimeSpan.FromMinutes(1))
        {
            failures.Add($"PersistentServicesOptions.Calls.SignatureFutureSkew must be between 0 and 1 minute (was {options.Calls.SignatureFutureSkew}): " +
                "how far ahead of this service's clock a signed call's timestamp may be; the deployment's clocks should agree within seconds.");
        }

        if (!Enum.IsDefined(options.Calls.LegacySignatures))
        {
            failures.Add($"PersistentServicesOptions.Calls.LegacySignatures must be Refuse, Accept or SignAndAccept (was {options.Calls.LegacySignatures}).");
        }

        failures.AddRange(Replication.ReplicationGroupRouter.Validate(options.Calls.ReplicationGroups, "PersistentServicesOptions.Calls.ReplicationGroups"));

        if (options.Calls.SignatureWindow < TimeSpan.FromSeconds(1) || options.Calls.AttemptTimeout < TimeSpan.FromMilliseconds(10) ||
            options.Calls.RetryDelay < TimeSpan.Zero || options.Calls.MaxRetryDelay < options.Calls.RetryDelay)
        {
            failures.Add("PersistentServicesOptions.Calls: SignatureWindow must be at least 1 s, AttemptTimeout at least 10 ms, RetryDelay not negative and at most MaxRetryDelay.");
        }

        if (options.Domain.Members.Count > 0)
        {
            if (!options.Domain.Members.ContainsKey(options.ServiceName))
            {
                failures.Add($"PersistentServicesOptions.Domain.Members must include this service ('{options.ServiceName}') when it is in a domain.");
            }

            if (options.Calls.PeerKey is null)
            {
                failures.Add("PersistentServicesOptions.Calls.PeerKey is required in a domain: members authenticate each other's DVs, flushes and recovery messages with it.");
            }

            if (options.Domain.Members.Keys.Any(name => name.Length is 0 or > Domain.DvHeader.MaxServiceNameLength || name.Contains(',') || name.Contains('=')))
            {
                failures.Add($"PersistentServicesOptions.Domain.Members: names must have 1 to {Domain.DvHeader.MaxServiceNameLength} characters, without ',' or '='.");
            }

            if (options.Domain.FlushTimeout < TimeSpan.FromMilliseconds(100))
            {
                failures.Add("PersistentServicesOptions.Domain.FlushTimeout must be at least 100 ms.");
            }
        }

        if (options.OwnerClaimType is not null && options.OwnerIdentity is not null)
        {
            failures.Add("PersistentServicesOptions: set OwnerClaimType or OwnerIdentity, not both.");
        }

        if (options.OwnerClaimType is { } ownerClaim && string.IsNullOrWhiteSpace(ownerClaim))
        {
            failures.Add("PersistentServicesOptions.OwnerClaimType must name a claim type (or be null for the built-in claims).");
        }

        if (options.ReplyTimeout is { } replyTimeout && replyTimeout != Timeout.InfiniteTimeSpan && replyTimeout < TimeSpan.FromMilliseconds(100))
        {
            failures.Add($"PersistentServicesOptions.ReplyTimeout must be at least 100 ms, or Timeout.InfiniteTimeSpan (was {replyTimeout}).");
        }

        if (options.Calls.DrainRetryTime < TimeSpan.Zero)
        {
            failures.Add($"PersistentServicesOptions.Calls.DrainRetryTime must not be negative (was {options.Calls.DrainRetryTime}).");
        }

        if (options.ReplayParallelism < 1)
        {
            failures.Add($"PersistentServicesOptions.ReplayParallelism must be positive (was {options.ReplayParallelism}).");
        }

        try
        {
            options.Log.Encryption.Validate();
        }
        catch (ArgumentException ex)
        {
            failures.Add(ex.Message.Replace("LogOptions.Encryption", "PersistentServicesOptions.Log.Encryption", StringComparison.Ordinal));
        }

        if (failures.Count == 0 && !string.IsNullOrWhiteSpace(options.LogDirectory))
        {
            try
            {
                options.BuildLogOptions().Validate();
            }
            catch (ArgumentException ex)
            {
                failures.Add($"{ex.Message} (MaxRecordBytes is MaxRequestBodyBytes + MaxLoggedHeaderBytes; raise PersistentServicesOptions.Log.PageSizeBits for larger requests)");
            }
        }

        return failures.Count == 0 ? ValidateOptionsResult.Success : ValidateOptionsResult.Fail(failures);
    }
}
