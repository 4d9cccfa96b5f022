using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using PersistentServices.Log;

namespace PersistentServices.Hosting;

/// <summary>
/// A clean fail-stop when the log cannot be opened before the server starts (damage, a format too new, a log key missing,
/// the directory in use): one log message that says what, where and what to do, then the process exits with
/// <see cref="PersistentServicesOptions.RecoveryFailureExitCode"/>, with no unhandled exception (a host whose
/// <c>StartAsync</c> throws ends in an abort, exit 134, with the error printed three times).
/// <para>
/// The host cannot be stopped while it is still starting (Kestrel's bind is then cancelled, which aborts as well), so the
/// stop is requested as soon as it has started. In between, nothing is served from the log: recovery is failed (ServiceAvailability), so
/// persistent, read-only and session requests get 503, and the health check reports the failure.
/// </para>
/// </summary>
internal static partial class FailStop
{
    /// <summary>
    /// Marks recovery failed; with an exit code configured, logs the refusal once, sets the exit code, asks the host to
    /// stop once started, and returns true (the caller returns normally). Without one (a test host in process), returns
    /// false and the caller rethrows.
    /// </summary>
    public static bool StopAfterStart(ServiceAvailability availability, PersistentServicesOptions options, IHostApplicationLifetime lifetime, ILogger logger, Exception error)
    {
        availability.Fail(error);
        if (options.RecoveryFailureExitCode is not { } exitCode)
        {
            return false;
        }

        // Refusals the library diagnosed carry their whole story in the message; a stack trace adds nothing but noise.
        if (error is LogCorruptionException or LogFormatException or LogEncryptionKeyException || error.GetType() == typeof(IOException))
        {
            StartRefused(logger, error.Message, exitCode);
        }
        else
        {
            StartFailed(logger, exitCode, error);
        }

        Environment.ExitCode = exitCode;
        lifetime.ApplicationStarted.Register(lifetime.StopApplication);
        return true;
    }

    [LoggerMessage(1210, LogLevel.Critical, "PersistentServices refused to start: {Reason} The service stops with exit code {ExitCode}.")]
    private static partial void StartRefused(ILogger logger, string reason, int exitCode);

    [LoggerMessage(1211, LogLevel.Critical, "PersistentServices could not open its log; the service stops with exit code {ExitCode}")]
    private static partial void StartFailed(ILogger logger, int exitCode, Exception exception);
}
