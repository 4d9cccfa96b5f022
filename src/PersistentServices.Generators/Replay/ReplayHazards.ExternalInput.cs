using System;
using System.Collections.Generic;
using System.Threading;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.Operations;

namespace PersistentServices.Generators.Replay;

/// <summary>PS0202: external input or a process fact (HTTP, files, databases, sockets, process id) used in persistent code.</summary>
internal static partial class ReplayHazards
{
    /// <summary>The API's display name when <paramref name="operation"/> is external input or a process fact; otherwise null.</summary>
    private static string? DescribeExternal(IOperation? operation, out string explanation)
    {
        explanation = string.Empty;
        return operation switch
        {
            IInvocationOperation invocation => DescribeExternalMethod(invocation.TargetMethod, out explanation),
            IMethodReferenceOperation reference => DescribeExternalMethod(reference.Method, out explanation),
            IPropertyReferenceOperation reference => DescribeExternalProperty(reference.Property, out explanation),
            IObjectCreationOperation { Constructor: { } constructor } => DescribeExternalCreation(constructor, out explanation),
            _ => null,
        };
    }

    /// <summary>
    /// True for a send through a client registered with <c>AddPersistentCalls()</c> (docs/calls.md): it is a persistent
    /// call, deduplicated at the callee and answered from the log in replay, not external input.
    /// </summary>
    private static bool IsPersistentCall(IOperation operation, string explanation, ReplayAnalysis analysis, CancellationToken cancellationToken)
    {
        if (!string.Equals(explanation, Descriptors.HttpCallExplanation, StringComparison.Ordinal))
        {
            return false;
        }

        var receiver = operation switch
        {
            IInvocationOperation invocation => Operations.GetReceiver(invocation),
            IMethodReferenceOperation reference => Operations.SkipConversions(reference.Instance),
            _ => null,
        };
        return receiver is not null && analysis.GetRegistry(cancellationToken).CallClients.IsPersistentClient(receiver, analysis.Source, cancellationToken);
    }

    private static string? DescribeExternalMethod(IMethodSymbol method, out string explanation)
    {
        explanation = string.Empty;
        method = method.ReducedFrom ?? method;
        var type = method.ContainingType;
        if (type is null || method.MethodKind != MethodKind.Ordinary)
        {
            return null;
        }

        var name = method.Name;
        var display = (method.IsExtensionMethod && method.Parameters.Length > 0 ? method.Parameters[0].Type.Name : type.Name) + "." + name + "()";

        if ((KnownSymbols.IsOrDerivesFrom(type, "System.Net.Http", "HttpMessageInvoker") && !method.IsStatic && !ObjectMembers.Contains(name) && name != "CancelPendingRequests")
            || KnownSymbols.Is(type, "System.Net.Http.Json", "HttpClientJsonExtensions"))
        {
            explanation = Descriptors.HttpCallExplanation;
            return display;
        }

        if (KnownSymbols.Is(type, "System.IO", "File")
            || KnownSymbols.Is(type, "System.IO", "Directory")
            || KnownSymbols.Is(type, "System.IO", "RandomAccess")
            || (KnownSymbols.Is(type, "System.IO", "Path") && name == "GetTempFileName")
            || ((KnownSymbols.IsOrDerivesFrom(type, "System.IO", "FileSystemInfo") || KnownSymbols.Is(type, "System.IO", "DriveInfo"))
                && !ObjectMembers.Contains(name)))
        {
            explanation = Descriptors.FileExplanation;
            return display;
        }

        if (IsDatabaseCall(method, type, name))
        {
            explanation = Descriptors.DatabaseExplanation;
            return display;
        }

        if ((IsSocketType(type) && !ObjectMembers.Contains(name)) || KnownSymbols.Is(type, "System.Net", "Dns"))
        {
            explanation = Descriptors.NetworkExplanation;
            return display;
        }

        if (KnownSymbols.Is(type, "System.Diagnostics", "Process") && name == "GetCurrentProcess")
        {
            explanation = Descriptors.ProcessFactExplanation;
            return display;
        }

        return null;
    }

    private static bool IsDatabaseCall(IMethodSymbol method, INamedTypeSymbol type, string name)
    {
        if (IsDbConnection(type))
        {
            return name.StartsWith("Open", StringComparison.Ordinal)
                   || name.StartsWith("BeginTransaction", StringComparison.Ordinal)
                   || name.StartsWith("BeginDbTransaction", StringComparison.Ordinal)
                   || name.StartsWith("ChangeDatabase", StringComparison.Ordinal)
                   || name.StartsWith("GetSchema", StringComparison.Ordinal)
                   || name == "EnlistTransaction";
        }

        if (KnownSymbols.IsOrDerivesFrom(type, "System.Data.Common", "DbCommand")
            || KnownSymbols.IsOrDerivesFrom(type, "System.Data.Common", "DbBatch")
            || KnownSymbols.Is(type, "System.Data", "IDbCommand"))
        {
            return name.StartsWith("Execute", StringComparison.Ordinal) || name.StartsWith("Prepare", StringComparison.Ordinal);
        }

        // Extension methods on a connection (Dapper's QueryAsync, ExecuteAsync, ...).
        return method.IsExtensionMethod && method.Parameters.Length > 0 && method.Parameters[0].Type is INamedTypeSymbol first && IsDbConnection(first);
    }

    private static bool IsDbConnection(INamedTypeSymbol type)
    {
        if (KnownSymbols.IsOrDerivesFrom(type, "System.Data.Common", "DbConnection") || KnownSymbols.Is(type, "System.Data", "IDbConnection"))
        {
            return true;
        }

        foreach (var implemented in type.AllInterfaces)
        {
            if (KnownSymbols.Is(implemented, "System.Data", "IDbConnection"))
            {
                return true;
            }
        }

        return false;
    }

    private static bool IsSocketType(ITypeSymbol type)
        => KnownSymbols.IsOrDerivesFrom(type, "System.Net.Sockets", "Socket")
           || KnownSymbols.IsOrDerivesFrom(type, "System.Net.Sockets", "TcpClient")
           || KnownSymbols.IsOrDerivesFrom(type, "System.Net.Sockets", "UdpClient")
           || KnownSymbols.IsOrDerivesFrom(type, "System.Net.Sockets", "TcpListener")
           || KnownSymbols.IsOrDerivesFrom(type, "System.Net.Sockets", "NetworkStream");

    private static string? DescribeExternalProperty(IPropertySymbol property, out string explanation)
    {
        explanation = string.Empty;
        var type = property.ContainingType;
        var name = property.Name;
        var display = type.Name + "." + name;
        if ((KnownSymbols.Is(type, "System", "Environment") && name is "ProcessId" or "MachineName" or "CurrentManagedThreadId")
            || (KnownSymbols.Is(type, "System.Threading", "Thread") && name == "ManagedThreadId"))
        {
            explanation = Descriptors.ProcessFactExplanation;
            return display;
        }

        if ((KnownSymbols.IsOrDerivesFrom(type, "System.IO", "FileSystemInfo") && FileSystemInfoProperties.Contains(name))
            || (KnownSymbols.Is(type, "System.IO", "DriveInfo") && name is not "Name" and not "RootDirectory"))
        {
            explanation = Descriptors.FileExplanation;
            return display;
        }

        return null;
    }

    private static string? DescribeExternalCreation(IMethodSymbol constructor, out string explanation)
    {
        explanation = string.Empty;
        var type = constructor.ContainingType;
        var display = "new " + type.Name + "()";
        var firstIsString = constructor.Parameters.Length > 0 && constructor.Parameters[0].Type.SpecialType == SpecialType.System_String;
        if (KnownSymbols.IsOrDerivesFrom(type, "System.IO", "FileStream")
            || ((KnownSymbols.Is(type, "System.IO", "StreamReader") || KnownSymbols.Is(type, "System.IO", "StreamWriter")) && firstIsString))
        {
            explanation = Descriptors.FileExplanation;
            return display;
        }

        // new TcpClient("host", port) and new UdpClient("host", port) connect.
        if ((KnownSymbols.Is(type, "System.Net.Sockets", "TcpClient") || KnownSymbols.Is(type, "System.Net.Sockets", "UdpClient")) && firstIsString)
        {
            explanation = Descriptors.NetworkExplanation;
            return display;
        }

        return null;
    }
}
